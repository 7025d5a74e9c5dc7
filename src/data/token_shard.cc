#include "data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include "common/error.h"
#include "common/files.h"

namespace dtrain::data {

// The format is little-endian on disk and the tokens are read in place.
static_assert(std::endian::native == std::endian::little, "token shards are read in place: little-endian only");

namespace {

std::string shardName(const std::string& path) { return "token shard '" + path + "'"; }

// ---- writing ----

void writeAll(int fd, const void* data, size_t bytes, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw errnoError("write", errno, what);
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

template <typename Token>
void writeTokens(int fd, const std::vector<uint32_t>& tokens, const std::string& what) {
  // Converted a slice at a time so a shard of 10^8 tokens needs no second copy.
  constexpr size_t kSlice = size_t{1} << 20;
  std::vector<Token> buffer;
  for (size_t begin = 0; begin < tokens.size(); begin += kSlice) {
    const size_t end = std::min(tokens.size(), begin + kSlice);
    buffer.assign(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                  tokens.begin() + static_cast<std::ptrdiff_t>(end));
    writeAll(fd, buffer.data(), buffer.size() * sizeof(Token), what);
  }
}

void validateForWriting(const std::string& path, const std::vector<uint32_t>& tokens, int64_t vocab_size) {
  if (vocab_size < 1 || vocab_size > (int64_t{1} << 32)) {
    throw ConfigError("cannot write " + shardName(path) + ": vocabulary size " + std::to_string(vocab_size) +
                      "; expected 1..4294967296");
  }
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw ConfigError("cannot write " + shardName(path) + ": " + std::to_string(tokens.size()) +
                      " tokens; expected at most 2147483647 per shard (the header counts them in an int32)");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (static_cast<int64_t>(tokens[i]) >= vocab_size) {
      throw ConfigError("cannot write " + shardName(path) + ": token " + std::to_string(tokens[i]) +
                        " at token offset " + std::to_string(i) + " is >= the vocabulary size " +
                        std::to_string(vocab_size) + "; expected ids in [0, " + std::to_string(vocab_size) + ")");
    }
  }
}

// Makes the rename itself durable. Some file systems cannot fsync a
// directory (EINVAL); the rename stands there all the same.
void fsyncDirectory(const std::string& dir, const std::string& what) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw errnoError("open", errno, what + ": cannot open directory '" + dir + "' to fsync it");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) throw errnoError("fsync", err, what + ": directory '" + dir + "'");
}

// The directory part of path ("." when it has none). POSIX string work, not
// std::filesystem: PyTorch's 2.x wheels export a clashing copy of it.
std::string directoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string tempPathFor(const std::string& path) {
  // Unique per process and call, so concurrent writers of one path never
  // share a temp file; hidden, so a glob over *.bin never picks it up.
  static std::atomic<uint64_t> counter{0};
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return dir + "." + name + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

// ---- reading ----

int openRegularFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw errnoError("open", errno, "cannot open " + shardName(path));
  return fd;
}

void readHeader(int fd, const std::string& path, int32_t* header) {
  size_t done = 0;
  auto* bytes = reinterpret_cast<char*>(header);
  while (done < kTokenShardHeaderBytes) {
    const ssize_t n = ::pread(fd, bytes + done, kTokenShardHeaderBytes - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw errnoError("pread", errno, "cannot read the header of " + shardName(path));
    if (n == 0) {
      throw ConfigError(shardName(path) + " ended after " + std::to_string(done) +
                        " header bytes while being read; expected a 1024-byte header");
    }
    done += static_cast<size_t>(n);
  }
}

// Checks the header against the file size; returns the token width in bytes.
int64_t checkHeader(const std::string& path, const int32_t* header, int64_t file_bytes) {
  if (header[0] != kTokenShardMagic) {
    throw ConfigError(shardName(path) + " has magic number " + std::to_string(header[0]) + "; expected " +
                      std::to_string(kTokenShardMagic) + " (llm.c's token shard format)");
  }
  const int32_t version = header[1];
  if (version != kTokenShardVersionUint16 && version != kTokenShardVersionUint32) {
    throw ConfigError(shardName(path) + " has unknown version " + std::to_string(version) +
                      "; expected 1 (uint16 tokens) or 2 (uint32 tokens)");
  }
  const int64_t count = header[2];
  if (count < 0) {
    throw ConfigError(shardName(path) + " has token count " + std::to_string(count) + "; expected >= 0");
  }
  const int64_t width = version == kTokenShardVersionUint16 ? 2 : 4;
  const int64_t expected = kTokenShardHeaderBytes + count * width;
  const std::string declared = "the header declares " + std::to_string(count) + " tokens of " +
                               std::to_string(width) + " bytes, so expected exactly " + std::to_string(expected) +
                               " bytes";
  if (file_bytes < expected) {
    throw ConfigError(shardName(path) + " is truncated: it has " + std::to_string(file_bytes) + " bytes but " +
                      declared);
  }
  if (file_bytes > expected) {
    throw ConfigError(shardName(path) + " has " + std::to_string(file_bytes - expected) +
                      " trailing bytes after its tokens: it has " + std::to_string(file_bytes) + " bytes but " +
                      declared);
  }
  return width;
}

template <typename Token>
int64_t firstTokenAtLeast(const unsigned char* tokens, int64_t count, int64_t limit) {
  const auto* t = reinterpret_cast<const Token*>(tokens);
  for (int64_t i = 0; i < count; ++i) {
    if (static_cast<int64_t>(t[i]) >= limit) return i;
  }
  return -1;
}

}  // namespace

void writeTokenShard(const std::string& path, const std::vector<uint32_t>& tokens, int64_t vocab_size) {
  validateForWriting(path, tokens, vocab_size);
  const std::string temp = tempPathFor(path);
  const std::string what = "writing " + shardName(path);
  const bool narrow = vocab_size <= kTokenShardUint16Vocab;
  int32_t header[kTokenShardHeaderInts] = {};
  header[0] = kTokenShardMagic;
  header[1] = narrow ? kTokenShardVersionUint16 : kTokenShardVersionUint32;
  header[2] = static_cast<int32_t>(tokens.size());

  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw errnoError("open", errno, what + ": cannot create " + temp);
  try {
    writeAll(fd, header, sizeof(header), what);
    if (narrow) {
      writeTokens<uint16_t>(fd, tokens, what);
    } else {
      writeTokens<uint32_t>(fd, tokens, what);
    }
    if (::fsync(fd) != 0) throw errnoError("fsync", errno, what);
    const int rc = ::close(fd);
    fd = -1;  // closed even when close() fails
    if (rc != 0) throw errnoError("close", errno, what);
    if (::rename(temp.c_str(), path.c_str()) != 0) throw errnoError("rename", errno, what + ": rename from " + temp);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  fsyncDirectory(directoryOf(path), what);
}

TokenShard::TokenShard(const std::string& path, int64_t vocab_size) : path_(path) {
  const int fd = openRegularFile(path);
  try {
    struct stat st {};
    DTRAIN_CHECK_ERRNO(::fstat(fd, &st), "cannot stat " + shardName(path));
    if (!S_ISREG(st.st_mode)) {
      throw ConfigError(shardName(path) + " is " + fileKindName(st.st_mode) + "; expected a regular file");
    }
    if (st.st_size < kTokenShardHeaderBytes) {
      throw ConfigError(shardName(path) + " has " + std::to_string(st.st_size) +
                        " bytes; expected at least the 1024-byte header (256 int32)");
    }
    int32_t header[kTokenShardHeaderInts];
    readHeader(fd, path, header);
    checkHeader(path, header, st.st_size);
    version_ = header[1];
    count_ = header[2];
    map_bytes_ = static_cast<size_t>(st.st_size);
    void* map = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) throw errnoError("mmap", errno, "cannot map " + shardName(path));
    map_ = map;
    tokens_ = static_cast<const unsigned char*>(map_) + kTokenShardHeaderBytes;
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);  // the mapping outlives the descriptor
  try {
    if (vocab_size > 0) checkVocab(vocab_size);
  } catch (...) {
    unmap();
    throw;
  }
}

TokenShard::~TokenShard() { unmap(); }

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      version_(other.version_),
      count_(other.count_),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)) {
  other.count_ = 0;
}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    version_ = other.version_;
    count_ = std::exchange(other.count_, 0);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
  }
  return *this;
}

void TokenShard::unmap() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  tokens_ = nullptr;
}

void TokenShard::checkVocab(int64_t vocab_size) const {
  const int64_t bad = version_ == kTokenShardVersionUint16 ? firstTokenAtLeast<uint16_t>(tokens_, count_, vocab_size)
                                                           : firstTokenAtLeast<uint32_t>(tokens_, count_, vocab_size);
  if (bad >= 0) {
    throw ConfigError(shardName(path_) + " has token " + std::to_string(token(bad)) + " at token offset " +
                      std::to_string(bad) + ", which is >= the model's vocabulary size " +
                      std::to_string(vocab_size) + "; expected token ids in [0, " + std::to_string(vocab_size) +
                      ")");
  }
}

void TokenShard::checkRange(int64_t begin, int64_t count) const {
  if (begin < 0 || count < 0 || begin > count_ - count) {
    throw std::out_of_range(shardName(path_) + ": tokens [" + std::to_string(begin) + ", " +
                            std::to_string(begin + count) + ") requested; it holds " + std::to_string(count_));
  }
}

uint32_t TokenShard::token(int64_t i) const {
  checkRange(i, 1);
  if (version_ == kTokenShardVersionUint16) return reinterpret_cast<const uint16_t*>(tokens_)[i];
  return reinterpret_cast<const uint32_t*>(tokens_)[i];
}

void TokenShard::copyTokens(int64_t begin, int64_t count, int64_t* out) const {
  checkRange(begin, count);
  if (version_ == kTokenShardVersionUint16) {
    const auto* t = reinterpret_cast<const uint16_t*>(tokens_) + begin;
    std::copy(t, t + count, out);
  } else {
    const auto* t = reinterpret_cast<const uint32_t*>(tokens_) + begin;
    std::copy(t, t + count, out);
  }
}

}  // namespace dtrain::data
