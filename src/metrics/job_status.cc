#include "metrics/job_status.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/settings.h"

namespace dtrain::metrics {
namespace {

DTRAIN_SETTING(std::string, kJobsDir, "jobs-dir", "DTRAIN_JOBS_DIR", "/tmp/dtrain-jobs",
               "Directory where each training job's rank 0 keeps its status file for `dtrain exporter`'s live page.");

// Bounds on what a crowded or hostile directory can cost one request.
constexpr size_t kMaxFiles = 256;
constexpr std::uintmax_t kMaxFileBytes = 64 * 1024;

}  // namespace

std::string jobsDirectory() { return kJobsDir.get(); }

std::string jobStatusPath(const std::string& dir, const std::string& job) {
  std::string safe = job;
  for (char& c : safe) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  return dir + "/" + safe + ".json";
}

bool writeJobStatus(const std::string& path, const std::string& json_text) {
  std::error_code ignored;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ignored);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << json_text << "\n";
    if (!out) {
      std::filesystem::remove(tmp, ignored);
      return false;
    }
  }
  std::filesystem::rename(tmp, path, ignored);
  return !ignored;
}

std::string jobsJson(const std::string& dir) {
  using nlohmann::json;
  std::vector<json> jobs;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  for (; !ec && it != std::filesystem::directory_iterator() && jobs.size() < kMaxFiles; it.increment(ec)) {
    const auto& path = it->path();
    std::error_code size_ec;
    if (path.extension() != ".json" || !it->is_regular_file(size_ec) ||
        std::filesystem::file_size(path, size_ec) > kMaxFileBytes || size_ec) {
      continue;
    }
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    json job = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (job.is_discarded() || !job.is_object() || !job.contains("job")) continue;
    if (!job.contains("rank")) job["rank"] = 0;
    jobs.push_back(std::move(job));
  }
  std::sort(jobs.begin(), jobs.end(), [](const json& a, const json& b) { return a["job"].dump() < b["job"].dump(); });
  return json(jobs).dump();
}

}  // namespace dtrain::metrics
