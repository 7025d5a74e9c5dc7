#include "common/files.h"

#include <sys/stat.h>

#include <cerrno>

namespace dtrain {

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool isRegularFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

const char* fileKindName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

int makeDirectories(const std::string& dir) {
  for (size_t at = dir.find('/', 1);; at = dir.find('/', at + 1)) {
    const std::string part = dir.substr(0, at);
    if (::mkdir(part.c_str(), 0755) != 0) {
      const int err = errno;
      struct stat st {};
      // An existing part may answer EROFS or EACCES rather than EEXIST.
      if (::stat(part.c_str(), &st) != 0) return err;
      if (!S_ISDIR(st.st_mode)) return ENOTDIR;
    }
    if (at == std::string::npos) return 0;
  }
}

}  // namespace dtrain
