#include "data/text_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/error.h"
#include "data/utf8.h"

namespace dtrain::data {
namespace {

// An open descriptor of a regular file, closed on scope exit.
class RegularFile {
 public:
  explicit RegularFile(const std::string& path) {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) {
      throw ConfigError("cannot read input file " + path + ": " + errnoString(errno));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      ::close(fd_);
      throw errnoError("fstat", err, "cannot read input file " + path);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw ConfigError("input file " + path + " is " + (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file") +
                        "; expected a text file");
    }
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
    bytes_ = st.st_size;
  }
  ~RegularFile() { ::close(fd_); }
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  int64_t bytes() const { return bytes_; }

 private:
  int fd_ = -1;
  int64_t bytes_ = 0;
};

}  // namespace

std::vector<InputFile> checkInputFiles(const std::vector<std::string>& paths) {
  std::vector<InputFile> files;
  files.reserve(paths.size());
  for (const std::string& path : paths) {
    RegularFile file(path);
    files.push_back({path, file.bytes()});
  }
  return files;
}

std::string readFileBytes(const std::string& path) {
  RegularFile file(path);
  std::string bytes;
  bytes.resize(static_cast<size_t>(file.bytes()));
  size_t done = 0;
  // The size is a hint: a file that grew or shrank since fstat is read to its end.
  for (;;) {
    if (done == bytes.size()) bytes.resize(bytes.size() + 65536);
    const ssize_t n = ::read(file.fd(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    DTRAIN_CHECK_ERRNO(n, "cannot read input file " + path);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

void requireUtf8(std::string_view text, const std::string& path) {
  const size_t offset = firstInvalidUtf8(text);
  if (offset == std::string_view::npos) return;
  char byte[8];
  std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<unsigned char>(text[offset]));
  throw ConfigError(path + ": not UTF-8 text: invalid byte " + byte + " at byte offset " + std::to_string(offset) +
                    "; expected UTF-8 (convert it first, e.g. with iconv)");
}

}  // namespace dtrain::data
