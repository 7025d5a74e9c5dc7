#include "data/data_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "common/files.h"

namespace dtrain::data {
namespace {

// Deflate's best case codes a 258-byte match in 2 bits.
constexpr uint64_t kMaxDeflateRatio = 1032;

// " (a link to /dev/zero)" when path is a symbolic link: the name the user
// gave says nothing about the device behind it.
std::string linkNote(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return "";
  char target[4096];
  ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
  if (n < 0) return " (a symbolic link)";
  return " (a link to " + std::string(target, static_cast<size_t>(n)) + ")";
}

}  // namespace

struct DataFile::Gzip {
  z_stream zs{};
  std::vector<uint8_t> input = std::vector<uint8_t>(1 << 16);
  bool member_done = false;
  bool input_eof = false;
  uint64_t produced = 0;

  ~Gzip() { inflateEnd(&zs); }
};

DataFile::DataFile(std::string path, std::string role) : path_(std::move(path)), role_(std::move(role)) {
  // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer.
  int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw errnoError("open", errno, "cannot open " + name());
  fd_.reset(fd);
  struct stat st {};
  DTRAIN_CHECK_ERRNO(::fstat(fd, &st), "cannot stat " + name());
  if (!S_ISREG(st.st_mode)) {
    throw ConfigError(name() + linkNote(path_) + " is " + fileKindName(st.st_mode) + "; expected a regular file");
  }
  DTRAIN_CHECK_ERRNO(::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK), "cannot read " + name());
  stored_bytes_ = static_cast<uint64_t>(st.st_size);

  uint8_t magic[2] = {0, 0};
  if (DTRAIN_CHECK_ERRNO(::pread(fd, magic, 2, 0), "cannot read " + name()) == 2 && magic[0] == 0x1f &&
      magic[1] == 0x8b) {
    gzip_ = std::make_unique<Gzip>();
    // 16 + MAX_WBITS: gzip framing only, so that a raw deflate or zlib
    // stream is not taken for one.
    if (inflateInit2(&gzip_->zs, 16 + MAX_WBITS) != Z_OK) {
      gzip_.reset();
      throw IoError("cannot decompress " + name() + " (gzip): zlib could not start (out of memory?)");
    }
  }
}

DataFile::~DataFile() = default;

uint64_t DataFile::maxBytes() const {
  if (!gzip_) return stored_bytes_;
  if (stored_bytes_ > std::numeric_limits<uint64_t>::max() / kMaxDeflateRatio) {
    return std::numeric_limits<uint64_t>::max();
  }
  return stored_bytes_ * kMaxDeflateRatio;
}

size_t DataFile::read(void* dst, size_t n) { return gzip_ ? readGzip(dst, n) : readStored(dst, n); }

uint64_t DataFile::skip(uint64_t n) {
  std::vector<uint8_t> scratch(1 << 16);
  uint64_t total = 0;
  while (total < n) {
    size_t got = read(scratch.data(), static_cast<size_t>(std::min<uint64_t>(scratch.size(), n - total)));
    if (got == 0) break;
    total += got;
  }
  return total;
}

bool DataFile::atEnd() {
  uint8_t byte;
  return read(&byte, 1) == 0;
}

size_t DataFile::readStored(void* dst, size_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  size_t total = 0;
  while (total < n) {
    ssize_t got = ::read(fd_.get(), out + total, n - total);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw errnoError("read", errno, "cannot read " + name());
    if (got == 0) break;
    total += static_cast<size_t>(got);
    stored_read_ += static_cast<uint64_t>(got);
  }
  return total;
}

// Keeps the unconsumed input, appends what the file has next; false at its
// end.
bool DataFile::refillGzipInput(size_t keep) {
  Gzip& g = *gzip_;
  if (g.input_eof) return false;
  if (keep > 0 && g.zs.next_in != g.input.data()) std::memmove(g.input.data(), g.zs.next_in, keep);
  g.zs.next_in = g.input.data();
  g.zs.avail_in = static_cast<uInt>(keep);
  size_t got = readStored(g.input.data() + keep, g.input.size() - keep);
  if (got == 0) {
    g.input_eof = true;
    return false;
  }
  g.zs.avail_in += static_cast<uInt>(got);
  return true;
}

// After a member's end: another member (concatenated gzip is valid gzip),
// the end of the file, or bytes gzip readers such as zlib's gzread skip in
// silence, which here make the file malformed.
bool DataFile::startNextGzipMember() {
  Gzip& g = *gzip_;
  while (g.zs.avail_in < 2 && refillGzipInput(g.zs.avail_in)) {
  }
  if (g.zs.avail_in == 0) return false;
  if (g.zs.avail_in >= 2 && g.zs.next_in[0] == 0x1f && g.zs.next_in[1] == 0x8b) {
    inflateReset(&g.zs);
    g.member_done = false;
    return true;
  }
  const uint64_t stream_end = stored_read_ - g.zs.avail_in;
  throw ConfigError(name() + ": " + std::to_string(stored_bytes_ - stream_end) +
                    " bytes of trailing data after its gzip stream (which ends at byte " +
                    std::to_string(stream_end) + " of " + std::to_string(stored_bytes_) +
                    "); expected the file to end there");
}

size_t DataFile::readGzip(void* dst, size_t n) {
  Gzip& g = *gzip_;
  g.zs.next_out = static_cast<Bytef*>(dst);
  g.zs.avail_out = static_cast<uInt>(std::min<size_t>(n, std::numeric_limits<uInt>::max()));
  const uInt wanted = g.zs.avail_out;
  while (g.zs.avail_out > 0) {
    if (g.member_done && !startNextGzipMember()) break;
    if (g.zs.avail_in == 0 && !refillGzipInput(0)) {
      throw IoError("cannot decompress " + name() + " (gzip): unexpected end of file (the stream is cut short)" +
                    " after " + std::to_string(g.produced + (wanted - g.zs.avail_out)) + " bytes");
    }
    int rc = inflate(&g.zs, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      g.member_done = true;
    } else if (rc != Z_OK && !(rc == Z_BUF_ERROR && g.zs.avail_in == 0)) {
      const std::string reason = g.zs.msg ? g.zs.msg : "zlib error " + std::to_string(rc);
      throw IoError("cannot decompress " + name() + " (gzip): " + reason + " after " +
                    std::to_string(g.produced + (wanted - g.zs.avail_out)) + " bytes");
    }
  }
  const size_t produced = wanted - g.zs.avail_out;
  g.produced += produced;
  return produced;
}

std::vector<uint8_t> readDataFile(const std::string& path, const std::string& role, uint64_t max_bytes) {
  DataFile file(path, role);
  if (!file.gzipped() && file.storedBytes() > max_bytes) {
    throw ConfigError(file.name() + " has " + std::to_string(file.storedBytes()) + " bytes; expected at most " +
                      std::to_string(max_bytes));
  }
  std::vector<uint8_t> bytes;
  const size_t chunk = 1 << 20;
  while (bytes.size() <= max_bytes) {
    const size_t old = bytes.size();
    bytes.resize(old + static_cast<size_t>(std::min<uint64_t>(chunk, max_bytes + 1 - old)));
    const size_t got = file.read(bytes.data() + old, bytes.size() - old);
    bytes.resize(old + got);
    if (got == 0) break;
  }
  if (bytes.size() > max_bytes) {
    throw ConfigError(file.name() + " has more than " + std::to_string(max_bytes) +
                      " bytes once decompressed; expected at most " + std::to_string(max_bytes));
  }
  return bytes;
}

}  // namespace dtrain::data
