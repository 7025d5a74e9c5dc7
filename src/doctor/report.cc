#include "doctor/report.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/text.h"
#include "doctor/doctor.h"

namespace dtrain::doctor {
namespace {

const char* statusColor(Status status) {
  switch (status) {
    case Status::kPass: return "\033[32m";  // green
    case Status::kWarn: return "\033[33m";  // yellow
    case Status::kFail: return "\033[1;31m";  // bold red
    case Status::kSkip: return "\033[2m";  // dim
  }
  return "";
}

std::string padded(const std::string& text, size_t width) {
  return text.size() >= width ? text + " " : text + std::string(width - text.size(), ' ');
}

// The lines of `text` without empty ones (a trailing newline adds none).
std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

}  // namespace

StatusCounts countStatuses(const std::vector<CheckResult>& results) {
  StatusCounts counts;
  for (const CheckResult& result : results) {
    switch (result.status) {
      case Status::kPass: ++counts.pass; break;
      case Status::kWarn: ++counts.warn; break;
      case Status::kFail: ++counts.fail; break;
      case Status::kSkip: ++counts.skip; break;
    }
  }
  return counts;
}

std::string formatTable(const DoctorReport& report, bool color) {
  size_t name_width = std::string("CHECK").size();
  for (const CheckResult& result : report.results) name_width = std::max(name_width, result.name.size());
  name_width += 2;
  const size_t status_width = 8;
  const std::string indent(name_width + status_width, ' ');

  std::ostringstream out;
  out << "dtrain doctor: " << report.host << " (root " << report.root << ")\n";
  out << padded("CHECK", name_width) << padded("STATUS", status_width) << "REASON\n";
  for (const CheckResult& result : report.results) {
    std::string status = statusName(result.status);
    out << padded(result.name, name_width);
    if (color) {
      out << statusColor(result.status) << status << "\033[0m" << std::string(status_width - status.size(), ' ');
    } else {
      out << padded(status, status_width);
    }
    out << result.reason << "\n";
    if ((result.status == Status::kWarn || result.status == Status::kFail) && !result.hint.empty()) {
      out << indent << "hint: " << result.hint << "\n";
    }
    for (const std::string& line : lines(result.detail)) out << indent << "  " << line << "\n";
  }
  StatusCounts counts = countStatuses(report.results);
  out << counted(counts.pass, "passed", "passed") << ", " << counted(counts.warn, "warning", "warnings") << ", "
      << counted(counts.fail, "failed", "failed") << ", " << counted(counts.skip, "skipped", "skipped") << "\n";
  return out.str();
}

std::string formatJson(const DoctorReport& report) {
  nlohmann::ordered_json checks = nlohmann::ordered_json::array();
  for (const CheckResult& result : report.results) {
    checks.push_back({{"name", result.name},
                      {"status", statusName(result.status)},
                      {"reason", result.reason},
                      {"hint", result.hint},
                      {"detail", result.detail}});
  }
  StatusCounts counts = countStatuses(report.results);
  nlohmann::ordered_json doc = {
      {"host", report.host},
      {"root", report.root},
      {"checks", checks},
      {"summary", {{"pass", counts.pass}, {"warn", counts.warn}, {"fail", counts.fail}, {"skip", counts.skip}}},
      {"exit_code", report.exit_code},
  };
  // Check output may hold bytes read from /proc or /sys that are not UTF-8:
  // replace them rather than throw.
  return doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

std::string formatCheckList(const std::vector<CheckSpec>& checks) {
  size_t width = 0;
  for (const CheckSpec& spec : checks) width = std::max(width, spec.name.size());
  std::ostringstream out;
  for (const CheckSpec& spec : checks) {
    out << padded(spec.name, width + 2) << spec.description;
    if (spec.active) out << " (active: runs with " << activeCheckOption(spec) << ")";
    out << "\n";
  }
  return out.str();
}

}  // namespace dtrain::doctor
