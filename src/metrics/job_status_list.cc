// The lister's side of job status files (job_status.h): which files are
// whose, and whether their process still runs.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "metrics/job_status.h"

namespace dtrain::metrics {
namespace {

using nlohmann::json;

// Bounds on what a crowded or hostile directory can cost one request.
constexpr size_t kMaxFiles = 256;
constexpr off_t kMaxFileBytes = 64 * 1024;

struct ProcStat {
  char state = '?';
  unsigned long long start_time = 0;
};

// /proc/<pid>/stat's state (field 3) and start time (field 22); nullopt
// when there is no such process.
std::optional<ProcStat> procStat(const std::string& pid) {
  const int fd = ::open(("/proc/" + pid + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buffer[1024];
  const ssize_t n = ::read(fd, buffer, sizeof(buffer) - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  const std::string text(buffer, static_cast<size_t>(n));
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
  const auto paren = text.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(paren + 1));
  ProcStat stat;
  fields >> stat.state;
  std::string skipped;
  for (int field = 4; field < 22; ++field) fields >> skipped;
  fields >> stat.start_time;
  if (!fields) return std::nullopt;
  return stat;
}

std::string pidNamespace(const std::string& pid) {
  char target[128];
  const ssize_t n = ::readlink(("/proc/" + pid + "/ns/pid").c_str(), target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : "";
}

// False when the file's process is gone or its pid now names another
// process; true when it runs or cannot be checked from this namespace.
bool writerMayRun(const json& job, const std::string& own_namespace) {
  const auto pid = job.find("pid");
  const auto ns = job.find("pid_ns");
  if (pid == job.end() || !pid->is_number_integer() || ns == job.end() || !ns->is_string()) return true;
  if (own_namespace.empty() || ns->get<std::string>() != own_namespace) return true;
  const long long id = pid->get<long long>();
  if (id <= 0 || id > std::numeric_limits<pid_t>::max()) return false;
  // kill(pid, 0) tells a gone process from another user's that a /proc
  // mounted with hidepid hides from this one.
  if (::kill(static_cast<pid_t>(id), 0) != 0 && errno == ESRCH) return false;
  const auto stat = procStat(std::to_string(id));
  if (!stat) return true;
  if (stat->state == 'Z' || stat->state == 'X' || stat->state == 'x') return false;
  const auto start = job.find("start_time");
  return start == job.end() || !start->is_number_unsigned() || start->get<unsigned long long>() == stat->start_time;
}

bool isUid(const std::string& name) {
  return !name.empty() && name.size() < 11 && std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isdigit(c) != 0;
  });
}

std::vector<std::string> entriesOf(DIR* dir) {
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

// The status object of one file, or nullopt (`why` set when it could not
// be read, left empty when it is no status file).
std::optional<json> readStatusFile(const std::string& path, uid_t owner, std::string& why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) why = "cannot read " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  struct stat st{};
  std::string text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == owner && st.st_size <= kMaxFileBytes) {
    text.resize(static_cast<size_t>(st.st_size));
    const ssize_t n = ::read(fd, text.data(), text.size());
    text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  ::close(fd);
  json job = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (job.is_discarded() || !job.is_object() || !job.contains("job")) return std::nullopt;
  return job;
}

}  // namespace

ProcessIdentity thisProcess() {
  ProcessIdentity id;
  id.pid = static_cast<long>(::getpid());
  if (auto stat = procStat("self")) id.start_time = stat->start_time;
  id.pid_namespace = pidNamespace("self");
  return id;
}

JobList listJobs(const std::string& dir) {
  JobList list;
  std::vector<json> jobs;
  DIR* base = ::opendir(dir.c_str());
  if (base == nullptr) {
    if (errno != ENOENT) {
      list.unreadable.push_back("cannot list the jobs directory " + dir + ": " + std::strerror(errno));
    }
    list.json = "[]";
    return list;
  }
  const std::string own_namespace = pidNamespace("self");
  size_t files = 0;
  for (const std::string& name : entriesOf(base)) {
    const std::string user_dir = dir + "/" + name;
    struct stat st{};
    if (!isUid(name) || ::lstat(user_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    const uid_t uid = static_cast<uid_t>(std::stoul(name));
    if (st.st_uid != uid) {
      list.unreadable.push_back(user_dir + " belongs to uid " + std::to_string(st.st_uid) + ", not to uid " + name +
                                " as its name says: its jobs are not listed");
      continue;
    }
    DIR* user = ::opendir(user_dir.c_str());
    if (user == nullptr) {
      list.unreadable.push_back("cannot list " + user_dir + " (the jobs of uid " + name + "): " + std::strerror(errno) +
                                "; run the exporter as root or as that user to show them");
      continue;
    }
    for (const std::string& file : entriesOf(user)) {
      if (file.size() <= 5 || file.compare(file.size() - 5, 5, ".json") != 0) continue;
      if (++files > kMaxFiles) break;
      const std::string path = user_dir + "/" + file;
      std::string why;
      auto job = readStatusFile(path, uid, why);
      if (!why.empty()) list.unreadable.push_back(why + " (a job of uid " + name + ")");
      if (!job) continue;
      if (!writerMayRun(*job, own_namespace)) {
        ::unlink(path.c_str());  // where this process may; listed no more either way
        continue;
      }
      if (!job->contains("rank")) (*job)["rank"] = 0;
      (*job)["uid"] = uid;
      jobs.push_back(std::move(*job));
    }
  }
  std::sort(jobs.begin(), jobs.end(), [](const json& a, const json& b) { return a["job"].dump() < b["job"].dump(); });
  list.json = json(jobs).dump();
  return list;
}

}  // namespace dtrain::metrics
