#include "doctor/doctor.h"

#include <algorithm>
#include <exception>
#include <set>

#include "common/error.h"
#include "common/text.h"
#include "doctor/gpu_checks.h"
#include "doctor/host_checks.h"

namespace dtrain::doctor {
namespace {

std::string groupOf(const std::string& name) { return name.substr(0, name.find('.')); }

// "gpu, gpu.count, gpu.driver, ..., host, host.memlock, ...": groups, each
// followed by its checks.
std::string validNames(const std::vector<CheckSpec>& all) {
  std::string text;
  std::string last_group;
  for (const CheckSpec& spec : all) {
    std::string group = groupOf(spec.name);
    if (group != last_group) {
      text += (text.empty() ? "" : ", ") + group;
      last_group = group;
    }
    text += ", " + spec.name;
  }
  return text;
}

// The names `item` stands for: itself when it is a check, the checks of its
// group when it is a group. ConfigError naming `flag` when neither.
std::vector<const CheckSpec*> resolve(const std::vector<CheckSpec>& all, const std::string& item,
                                      const std::string& flag) {
  std::vector<const CheckSpec*> found;
  for (const CheckSpec& spec : all) {
    if (spec.name == item || groupOf(spec.name) == item) found.push_back(&spec);
  }
  if (found.empty()) {
    throw ConfigError(flag + ": unknown check '" + item + "'; expected a comma list of these checks or groups: " +
                      validNames(all));
  }
  return found;
}

}  // namespace

std::vector<CheckSpec> allChecks() {
  std::vector<CheckSpec> checks;
  addGpuChecks(checks);
  addHostChecks(checks);
  return checks;
}

std::vector<std::string> splitNameList(const std::string& text, const std::string& flag) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (true) {
    size_t comma = text.find(',', begin);
    std::string item = trimmed(text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (item.empty()) {
      throw ConfigError(flag + " '" + text + "': empty item " + std::to_string(items.size() + 1) +
                        "; expected a comma list of check or group names such as host,gpu.count");
    }
    items.push_back(item);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return items;
}

std::string activeCheckOption(const CheckSpec& spec) {
  return groupOf(spec.name) == "peers" ? "--peers HOST:PORT[,HOST:PORT...]" : "--allreduce";
}

bool activeCheckRequested(const CheckSpec& spec, const DoctorOptions& options) {
  if (!spec.active) return true;
  if (groupOf(spec.name) == "peers") return !options.peers.empty();
  return options.allreduce;
}

std::vector<CheckSpec> selectChecks(const std::vector<CheckSpec>& all, const std::vector<std::string>& check,
                                    const std::vector<std::string>& skip, const DoctorOptions& options) {
  std::set<std::string> chosen;
  if (check.empty()) {
    for (const CheckSpec& spec : all) chosen.insert(spec.name);
  }
  for (const std::string& item : check) {
    std::vector<const CheckSpec*> specs = resolve(all, item, "--check");
    bool all_active = std::all_of(specs.begin(), specs.end(), [](const CheckSpec* s) { return s->active; });
    if (all_active && !activeCheckRequested(*specs.front(), options)) {
      throw ConfigError("--check " + item + ": " + specs.front()->name + " is an active check and runs only with " +
                        activeCheckOption(*specs.front()));
    }
    for (const CheckSpec* spec : specs) chosen.insert(spec->name);
  }
  for (const std::string& item : skip) {
    for (const CheckSpec* spec : resolve(all, item, "--skip")) chosen.erase(spec->name);
  }
  std::vector<CheckSpec> selected;
  for (const CheckSpec& spec : all) {
    if (chosen.count(spec.name) && activeCheckRequested(spec, options)) selected.push_back(spec);
  }
  return selected;
}

CheckResult runCheck(const CheckSpec& spec, const DoctorContext& ctx) {
  CheckResult result;
  try {
    result = spec.run(ctx);
  } catch (const Error& e) {
    result = fail(spec.name, "check raised: " + e.message(), "report this with the output of `dtrain doctor --json`");
  } catch (const std::exception& e) {
    result = fail(spec.name, "check raised: " + std::string(e.what()),
                  "report this with the output of `dtrain doctor --json`");
  } catch (...) {
    result = fail(spec.name, "check raised: an unknown exception",
                  "report this with the output of `dtrain doctor --json`");
  }
  result.name = spec.name;
  return result;
}

std::vector<CheckResult> runChecks(const std::vector<CheckSpec>& checks, const DoctorContext& ctx) {
  std::vector<CheckResult> results;
  results.reserve(checks.size());
  for (const CheckSpec& spec : checks) results.push_back(runCheck(spec, ctx));
  return results;
}

int exitCodeFor(const std::vector<CheckResult>& results, bool strict) {
  bool any_warn = false;
  for (const CheckResult& result : results) {
    if (result.status == Status::kFail) return 2;
    if (result.status == Status::kWarn) any_warn = true;
  }
  return any_warn && strict ? 1 : 0;
}

}  // namespace dtrain::doctor
