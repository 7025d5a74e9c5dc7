#include "doctor/gpu_expected.h"

#include <cctype>
#include <vector>

namespace dtrain::doctor {
namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

std::optional<int> parseCount(const std::string& text) {
  if (text.empty() || text.size() > 6) return std::nullopt;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  return std::stoi(text);
}

// "0,1,2,3" or "0-3,6": the number of ids.
std::optional<int> countIds(const std::string& text) {
  int count = 0;
  for (const std::string& part : split(text, ',')) {
    size_t dash = part.find('-');
    if (dash == std::string::npos) {
      if (!parseCount(part)) return std::nullopt;
      ++count;
      continue;
    }
    auto first = parseCount(part.substr(0, dash));
    auto last = parseCount(part.substr(dash + 1));
    if (!first || !last || *last < *first) return std::nullopt;
    count += *last - *first + 1;
  }
  return count;
}

// "4", "h100:4", "gpu:h100:4", "a100:2,h100:2": the counts summed.
std::optional<int> countPerNode(const std::string& text) {
  int count = 0;
  for (const std::string& part : split(text, ',')) {
    auto n = parseCount(part.substr(part.rfind(':') == std::string::npos ? 0 : part.rfind(':') + 1));
    if (!n) return std::nullopt;
    count += *n;
  }
  return count;
}

}  // namespace

ExpectedGpus expectedGpus(const DoctorContext& ctx) {
  if (ctx.options.expect_gpus) return {ctx.options.expect_gpus, "--expect-gpus", {}};
  struct Source {
    const char* variable;
    std::optional<int> (*parse)(const std::string&);
    const char* expected;
  };
  const Source sources[] = {
      {"SLURM_GPUS_ON_NODE", parseCount, "a GPU count"},
      {"SLURM_JOB_GPUS", countIds, "a list of GPU ids such as 0,1,2,3"},
      {"SLURM_STEP_GPUS", countIds, "a list of GPU ids such as 0,1,2,3"},
      {"SLURM_GPUS_PER_NODE", countPerNode, "a count such as 4 or h100:4"},
  };
  for (const Source& source : sources) {
    auto value = ctx.envValue(source.variable);
    if (!value || value->empty()) continue;
    if (auto count = source.parse(*value)) return {count, source.variable, {}};
    return {std::nullopt, source.variable,
            std::string(source.variable) + "='" + *value + "' is not " + source.expected};
  }
  return {};
}

std::string gpuName(unsigned gpu) { return "GPU" + std::to_string(gpu); }

}  // namespace dtrain::doctor
