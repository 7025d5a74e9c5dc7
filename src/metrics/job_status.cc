#include "metrics/job_status.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/settings.h"

namespace dtrain::metrics {
namespace {

DTRAIN_SETTING(std::string, kJobsDir, "jobs-dir", "DTRAIN_JOBS_DIR", "/tmp/dtrain-jobs",
               "Directory where each training job's rank 0 keeps its status file (in a folder per user) for "
               "`dtrain exporter`'s live page.");

std::string parentOf(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool failed(std::string* why, const std::string& text) {
  if (why != nullptr) *why = text;
  return false;
}

// The shared jobs directory: made sticky and writable by all, as /tmp, so
// that every user can make a folder in it and none can remove another's.
// One that exists is left as it is (its owner chose).
void makeSharedDirectory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 01777) == 0) ::chmod(dir.c_str(), 01777);  // past the umask
}

// This user's folder: made 0755 (others list it, cannot write in it); one
// that exists must be a directory of this user, not a link or another's.
bool ownDirectory(const std::string& dir, std::string* why) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return failed(why, "cannot create " + dir + ": " + std::strerror(errno));
  }
  struct stat st{};
  if (::lstat(dir.c_str(), &st) != 0) return failed(why, "cannot stat " + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return failed(why, dir + " is not a directory (a link?); expected this user's folder");
  if (st.st_uid != ::geteuid()) {
    return failed(why, dir + " belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " +
                           std::to_string(::geteuid()) + ")");
  }
  return true;
}

}  // namespace

std::string jobsDirectory() { return kJobsDir.get(); }

std::string jobStatusPath(const std::string& dir, const std::string& job) {
  std::string safe = job;
  for (char& c : safe) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  return dir + "/" + std::to_string(::geteuid()) + "/" + safe + ".json";
}

bool writeJobStatus(const std::string& path, const std::string& json_text, std::string* why) {
  const std::string user_dir = parentOf(path);
  makeSharedDirectory(parentOf(user_dir));
  if (!ownDirectory(user_dir, why)) return false;
  const std::string tmp = path + ".tmp";
  // O_NOFOLLOW: the folder is this user's, but never write through a link.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return failed(why, "cannot create " + tmp + ": " + std::strerror(errno));
  const std::string text = json_text + "\n";
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  const int write_errno = errno;
  ::close(fd);
  if (written != text.size()) {
    ::unlink(tmp.c_str());
    return failed(why, "cannot write " + tmp + ": " + std::strerror(write_errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    ::unlink(tmp.c_str());
    return failed(why, "cannot rename " + tmp + " to " + path + ": " + std::strerror(rename_errno));
  }
  return true;
}

}  // namespace dtrain::metrics
