#include "common/host.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <ctime>

#include "common/error.h"

namespace dtrain {

const std::string& hostName() {
  static const std::string name = [] {
    char buffer[HOST_NAME_MAX + 1] = {};
    if (::gethostname(buffer, sizeof(buffer) - 1) != 0 || buffer[0] == '\0') return std::string("localhost");
    return std::string(buffer);
  }();
  return name;
}

double threadCpuSeconds() {
  timespec now{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) != 0) return 0;
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

std::string selfExecutablePath() {
  char buffer[PATH_MAX];
  const ssize_t n = DTRAIN_CHECK_ERRNO(::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1),
                                       "cannot find this program's path (/proc/self/exe)");
  return std::string(buffer, static_cast<size_t>(n));
}

std::string makeTemporaryDirectory(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" + prefix + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw errnoError("mkdtemp", errno, "cannot create a temporary directory " + pattern);
  }
  return pattern;
}

}  // namespace dtrain
