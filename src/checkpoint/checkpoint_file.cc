#include "checkpoint/checkpoint_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>

#include "checkpoint/checkpoint_format.h"
#include "common/error.h"
#include "common/files.h"
#include "common/host.h"

namespace dtrain {

static_assert(std::endian::native == std::endian::little, "dtrain checkpoints assume a little-endian host");

namespace checkpoint_format {

uint32_t crcStart() { return static_cast<uint32_t>(::crc32(0L, Z_NULL, 0)); }

// zlib's crc32 takes a uInt length; feed it in chunks.
uint32_t crcUpdate(uint32_t crc, const void* data, uint64_t size) {
  auto* p = static_cast<const Bytef*>(data);
  while (size > 0) {
    const uInt n = static_cast<uInt>(std::min<uint64_t>(size, uint64_t{1} << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, n));
    p += n;
    size -= n;
  }
  return crc;
}

CrcFileWriter::CrcFileWriter(int fd, const std::string& what) : fd_(fd), what_(what), crc_(crcStart()) {
  buffer_.reserve(kIoChunk);
}

void CrcFileWriter::write(const void* data, size_t size) {
  crc_ = crcUpdate(crc_, data, size);
  written_ += size;
  if (buffer_.size() + size <= kIoChunk) {
    buffer_.append(static_cast<const char*>(data), size);
    return;
  }
  flush();
  writeAll(static_cast<const char*>(data), size);
}

void CrcFileWriter::flush() {
  writeAll(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void CrcFileWriter::writeAll(const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd_, data, std::min(size, kIoChunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw errnoError("write", errno, what_);
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void fsyncDir(const std::string& dir, const std::string& what) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw errnoError("open", errno, what + ": cannot open directory '" + dir + "' to fsync it");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory (EINVAL); the rename stands.
  if (rc != 0 && err != EINVAL) {
    throw errnoError("fsync", err, what + ": directory '" + dir + "'");
  }
}

std::string directoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace checkpoint_format

namespace {

using namespace checkpoint_format;

struct DTypeName {
  CheckpointDtype type;
  const char* name;
  size_t size;
};
constexpr DTypeName kDTypes[] = {
    {CheckpointDtype::kFloat32, "float32", 4}, {CheckpointDtype::kFloat64, "float64", 8},
    {CheckpointDtype::kFloat16, "float16", 2}, {CheckpointDtype::kBFloat16, "bfloat16", 2},
    {CheckpointDtype::kInt64, "int64", 8},     {CheckpointDtype::kInt32, "int32", 4},
    {CheckpointDtype::kInt16, "int16", 2},     {CheckpointDtype::kInt8, "int8", 1},
    {CheckpointDtype::kUInt8, "uint8", 1},     {CheckpointDtype::kBool, "bool", 1}};

// Parses and checks the header (ConfigError naming `path`); entries get
// offsets from the start of the file.
void parseHeader(const std::string& path, const std::string& text, uint64_t data_begin, nlohmann::json& meta,
                 std::vector<CheckpointFileEntry>& entries, uint64_t& data_bytes) {
  data_bytes = 0;
  try {
    const nlohmann::json header = nlohmann::json::parse(text);
    meta = header.at("meta");
    std::set<std::string> names;
    for (const auto& t : header.at("tensors")) {
      CheckpointFileEntry entry;
      entry.name = t.at("name").get<std::string>();
      const std::string where = path + ": tensor '" + entry.name + "'";
      if (!names.insert(entry.name).second) throw ConfigError(where + " appears twice");
      const auto dtype = checkpointDtypeFromName(t.at("dtype").get<std::string>());
      if (!dtype) throw ConfigError(where + " has unknown dtype " + t.at("dtype").dump());
      entry.dtype = *dtype;
      entry.shape = t.at("shape").get<std::vector<int64_t>>();
      entry.bytes = t.at("bytes").get<uint64_t>();
      uint64_t expected = checkpointDtypeSize(entry.dtype);
      for (int64_t d : entry.shape) {
        if (d < 0 || __builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected)) {
          throw ConfigError(where + " has an invalid shape " + t.at("shape").dump());
        }
      }
      if (expected != entry.bytes) {
        throw ConfigError(where + " has shape " + t.at("shape").dump() + " of " + std::to_string(expected) +
                          " bytes, but the header says " + std::to_string(entry.bytes));
      }
      if (t.at("offset").get<uint64_t>() != data_bytes) {
        throw ConfigError(where + " is not packed after the one before it (offset " + t.at("offset").dump() +
                          ", expected " + std::to_string(data_bytes) + ")");
      }
      entry.offset = data_begin + data_bytes;
      if (__builtin_add_overflow(data_bytes, entry.bytes, &data_bytes)) throw ConfigError(where + " is too large");
      entries.push_back(std::move(entry));
    }
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path + ": malformed header (" + e.what() + ")");
  }
}

}  // namespace

const char* checkpointDtypeName(CheckpointDtype dtype) {
  for (const auto& d : kDTypes) {
    if (d.type == dtype) return d.name;
  }
  return "unknown";
}

std::optional<CheckpointDtype> checkpointDtypeFromName(const std::string& name) {
  for (const auto& d : kDTypes) {
    if (name == d.name) return d.type;
  }
  return std::nullopt;
}

size_t checkpointDtypeSize(CheckpointDtype dtype) {
  for (const auto& d : kDTypes) {
    if (d.type == dtype) return d.size;
  }
  return 1;
}

std::string checkpointTemporaryName(const std::string& final_name) {
  return "." + final_name + ".tmp-" + hostName() + "-" + std::to_string(::getpid());
}

void removeDeadCheckpointTemporaries(const std::string& dir, const std::string& stem) {
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) return;
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(handle)) names.emplace_back(entry->d_name);
  ::closedir(handle);
  const std::string head = "." + stem, marker = ".tmp-" + hostName() + "-";
  for (const std::string& name : names) {
    const size_t at = name.rfind(marker);
    if (name.compare(0, head.size(), head) != 0 || at == std::string::npos) continue;
    const std::string pid_text = name.substr(at + marker.size());
    if (pid_text.empty() || pid_text.size() > 9 ||
        !std::all_of(pid_text.begin(), pid_text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) ::unlink((dir + "/" + name).c_str());
  }
}

int64_t CheckpointFileEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

CheckpointFile::CheckpointFile(const std::string& path) : path_(path) {
  struct stat st {};
  // A FIFO, device or directory is refused without blocking in open().
  fd_ = openRegularFile(path, "checkpoint", &st).release();
  size_ = static_cast<uint64_t>(st.st_size);
  try {
    char magic[sizeof(kMagic)] = {0};
    read(0, magic, std::min<uint64_t>(size_, sizeof(magic)));
    if (std::memcmp(magic, kMagic, std::min<uint64_t>(size_, sizeof(kMagic))) != 0) {
      throw ConfigError(path + " is not a dtrain checkpoint (bad magic)");
    }
    if (size_ < kPreambleBytes) {
      throw ConfigError(path + " is truncated: " + std::to_string(size_) + " bytes, shorter than the " +
                        std::to_string(kPreambleBytes) + "-byte preamble");
    }
    uint32_t version = 0;
    read(8, &version, sizeof(version));
    if (version != kFormatVersion) {
      throw ConfigError(path + " has checkpoint format version " + std::to_string(version) + "; this dtrain reads " +
                        std::to_string(kFormatVersion));
    }
    uint64_t header_bytes = 0;
    read(12, &header_bytes, sizeof(header_bytes));
    checkTrailer(header_bytes);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

CheckpointFile::~CheckpointFile() { ::close(fd_); }

// The trailer against the size, then the header. A header that does not
// parse is reported only if the CRC holds (otherwise the file is just corrupt).
void CheckpointFile::checkTrailer(uint64_t header_bytes) {
  const uint64_t payload = size_ >= kPreambleBytes + kTrailerBytes ? size_ - kTrailerBytes : 0;
  char end_magic[sizeof(kEndMagic)] = {0};
  uint64_t recorded = 0;
  if (payload > 0) {
    read(size_ - sizeof(kEndMagic), end_magic, sizeof(end_magic));
    read(payload, &recorded, sizeof(recorded));
  }
  std::optional<uint64_t> data_bytes;
  std::optional<ConfigError> header_error;
  if (header_bytes <= size_ - kPreambleBytes) {
    std::string text(header_bytes, '\0');
    read(kPreambleBytes, text.data(), header_bytes);
    try {
      uint64_t bytes = 0;
      parseHeader(path_, text, kPreambleBytes + header_bytes, meta_, entries_, bytes);
      data_bytes = bytes;
    } catch (const ConfigError& e) {
      header_error = e;
    }
  }
  const std::string have = std::to_string(size_) + " bytes";
  if (payload == 0 || std::memcmp(end_magic, kEndMagic, sizeof(kEndMagic)) != 0 || recorded != payload) {
    if (header_bytes > size_ - kPreambleBytes) {
      throw ConfigError(path_ + " is truncated: " + have + ", but its header alone needs " +
                        std::to_string(kPreambleBytes + header_bytes));
    }
    if (!data_bytes) {
      throw ConfigError(path_ + " is truncated or corrupt: " + have + ", with neither a valid trailer nor header");
    }
    const uint64_t expected = kPreambleBytes + header_bytes + *data_bytes + kTrailerBytes;
    if (size_ < expected) throw ConfigError(path_ + " is truncated: " + have + ", expected " + std::to_string(expected));
    if (size_ > expected) {
      throw ConfigError(path_ + " has " + have + ", expected " + std::to_string(expected) + " (extra bytes at the end)");
    }
    throw ConfigError(path_ + " has a damaged trailer (file is corrupt)");
  }
  payload_ = payload;
  read(payload + 8, &stored_crc_, sizeof(stored_crc_));
  if (!header_error && kPreambleBytes + header_bytes + *data_bytes != payload) {
    header_error = ConfigError(path_ + ": header lists " + std::to_string(*data_bytes) + " bytes of tensors, but the " +
                               "file holds " + std::to_string(payload - kPreambleBytes - header_bytes));
  }
  if (header_bytes > payload - kPreambleBytes) {
    header_error = ConfigError(path_ + ": header length " + std::to_string(header_bytes) + " exceeds the file");
  }
  if (header_error) {
    verify();
    throw *header_error;
  }
  data_begin_ = kPreambleBytes + header_bytes;
}

const CheckpointFileEntry* CheckpointFile::find(const std::string& name) const {
  for (const CheckpointFileEntry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

void CheckpointFile::read(uint64_t offset, void* out, size_t size) const {
  auto* p = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t n = ::pread(fd_, p, std::min(size, kIoChunk), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw errnoError("read", errno, "reading checkpoint " + path_);
    if (n == 0) throw IoError("checkpoint " + path_ + " shrank while it was being read");
    p += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
}

uint32_t CheckpointFile::crcOf(uint64_t begin, uint64_t end, uint32_t crc) const {
  std::string chunk;
  for (uint64_t at = begin; at < end; at += chunk.size()) {
    chunk.resize(std::min<uint64_t>(end - at, kIoChunk));
    read(at, chunk.data(), chunk.size());
    crc = crcUpdate(crc, chunk.data(), chunk.size());
  }
  return crc;
}

void CheckpointFile::verify() const {
  if (crcOf(0, payload_, crcStart()) != stored_crc_) {
    throw ConfigError(path_ + ": checksum mismatch (file is corrupt)");
  }
}

void CheckpointFile::readAll(const std::function<void*(const CheckpointFileEntry&)>& storage) const {
  // The tensors go straight into their storage while the CRC is summed.
  uint32_t crc = crcOf(0, data_begin_, crcStart());
  for (const CheckpointFileEntry& entry : entries_) {
    void* bytes = storage(entry);
    if (entry.bytes > 0) {
      read(entry.offset, bytes, entry.bytes);
      crc = crcUpdate(crc, bytes, entry.bytes);
    }
  }
  if (crc != stored_crc_) throw ConfigError(path_ + ": checksum mismatch (file is corrupt)");
}

}  // namespace dtrain
