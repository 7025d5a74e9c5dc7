#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/error.h"

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

FileDescriptor openRegularFile(const std::string& path, const std::string& what, struct stat* st) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) throw errnoError("open", errno, "cannot open " + what + " " + path);
  struct stat own {};
  struct stat& info = st != nullptr ? *st : own;
  if (::fstat(fd.get(), &info) != 0) throw errnoError("fstat", errno, "cannot stat " + what + " " + path);
  if (!S_ISREG(info.st_mode)) {
    throw ConfigError(what + " " + path + " is " + fileKindName(info.st_mode) + "; expected a regular file");
  }
  if (::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK) != 0) {
    throw errnoError("fcntl", errno, "cannot read " + what + " " + path);
  }
  return fd;
}

std::string readRegularFile(const std::string& path, const std::string& what) {
  struct stat st {};
  const FileDescriptor fd = openRegularFile(path, what, &st);
  std::string text;
  text.reserve(static_cast<size_t>(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw errnoError("read", errno, "cannot read " + what + " " + path);
    if (n == 0) return text;
    text.append(chunk, static_cast<size_t>(n));
  }
}

std::string directoryBlocker(const std::string& dir) {
  for (size_t at = dir.find('/', 1);; at = dir.find('/', at + 1)) {
    const std::string part = dir.substr(0, at);
    struct stat st {};
    if (::stat(part.c_str(), &st) != 0) return "";  // missing from here on: mkdir makes it
    if (!S_ISDIR(st.st_mode)) return "'" + part + "' is " + fileKindName(st.st_mode);
    if (at == std::string::npos) return "";
  }
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
