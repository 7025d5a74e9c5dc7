#include "dtrain/checkpoint.h"

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
#include <set>

#include "common/host.h"
#include "common/error.h"
#include "common/log.h"

namespace dtrain {
namespace {

static_assert(std::endian::native == std::endian::little, "dtrain checkpoints assume a little-endian host");

constexpr char kMagic[8] = {'D', 'T', 'R', 'A', 'I', 'N', 'C', 'K'};
constexpr char kEndMagic[8] = {'D', 'T', 'C', 'K', 'E', 'N', 'D', '\0'};
constexpr uint32_t kFormatVersion = 1;
constexpr uint64_t kPreambleBytes = 8 + 4 + 8;  // magic, version, header length
constexpr uint64_t kTrailerBytes = 8 + 4 + 8;   // payload length, crc, end magic
constexpr size_t kIoChunk = size_t{8} << 20;

struct DTypeName {
  torch::ScalarType type;
  const char* name;
};
constexpr DTypeName kDTypes[] = {{torch::kFloat, "float32"}, {torch::kDouble, "float64"},
                                 {torch::kHalf, "float16"},  {torch::kBFloat16, "bfloat16"},
                                 {torch::kLong, "int64"},    {torch::kInt, "int32"},
                                 {torch::kShort, "int16"},   {torch::kChar, "int8"},
                                 {torch::kByte, "uint8"},    {torch::kBool, "bool"}};

std::optional<torch::ScalarType> dtypeFromName(const std::string& name) {
  for (const auto& d : kDTypes) {
    if (name == d.name) return d.type;
  }
  return std::nullopt;
}

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

std::string checkpointName(const std::string& prefix, int64_t step) {
  char digits[32];
  std::snprintf(digits, sizeof(digits), "%09lld", static_cast<long long>(step));
  return prefix + "-" + digits + ".dtck";
}

// The step of a final name, or -1 (only the exact name save() writes counts).
int64_t stepOf(const std::string& name, const std::string& prefix) {
  const std::string head = prefix + "-", tail = ".dtck";
  if (name.size() <= head.size() + tail.size() || name.size() > head.size() + tail.size() + 18 ||
      name.compare(0, head.size(), head) != 0 || !name.ends_with(tail)) {
    return -1;
  }
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
  const int64_t step = std::stoll(digits);
  return checkpointName(prefix, step) == name ? step : -1;
}

// std::filesystem is not used here: PyTorch's 2.x wheels export their own
// copy of it from libtorch.so, which binds first and crashes (remove_all).

// The names in dir; nullopt when dir does not exist. IoError otherwise.
std::optional<std::vector<std::string>> namesIn(const std::string& dir) {
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) {
    if (errno == ENOENT) return std::nullopt;
    throw errnoError("opendir", errno, "cannot list checkpoint directory '" + dir + "'");
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(handle)) names.emplace_back(entry->d_name);
  ::closedir(handle);
  return names;
}

bool isRegularFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// mkdir -p; returns 0 or the errno of the first step that failed.
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

std::vector<std::string> listCheckpoints(const std::string& dir, const std::string& prefix) {
  std::vector<std::pair<int64_t, std::string>> found;
  for (const std::string& name : namesIn(dir).value_or(std::vector<std::string>{})) {
    const int64_t step = stepOf(name, prefix);
    if (step >= 0 && isRegularFile(dir + "/" + name)) found.emplace_back(step, dir + "/" + name);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> paths;
  for (auto& item : found) paths.push_back(std::move(item.second));
  return paths;
}

std::optional<std::pair<std::string, CheckpointState>> loadLatestValidIn(const std::string& dir,
                                                                          const std::string& prefix) {
  for (const std::string& path : listCheckpoints(dir, prefix)) {
    try {
      return std::make_pair(path, loadCheckpoint(path));
    } catch (const Error& e) {
      DTRAIN_LOG_WARN("skipping an invalid checkpoint: " << e.message());
    }
  }
  return std::nullopt;
}

// ---- writing ----

// Buffers small writes, passes large ones straight through, and keeps the
// CRC of everything written.
class CrcFileWriter {
 public:
  CrcFileWriter(int fd, const std::string& what) : fd_(fd), what_(what) { buffer_.reserve(kIoChunk); }
  void write(const void* data, size_t size) {
    crc_ = crcUpdate(crc_, data, size);
    written_ += size;
    if (buffer_.size() + size <= kIoChunk) {
      buffer_.append(static_cast<const char*>(data), size);
      return;
    }
    flush();
    writeAll(static_cast<const char*>(data), size);
  }
  void flush() {
    writeAll(buffer_.data(), buffer_.size());
    buffer_.clear();
  }
  uint32_t crc() const { return crc_; }
  uint64_t written() const { return written_; }

 private:
  void writeAll(const char* data, size_t size) {
    while (size > 0) {
      const ssize_t n = ::write(fd_, data, std::min(size, kIoChunk));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw errnoError("write", errno, what_);
      data += n;
      size -= static_cast<size_t>(n);
    }
  }
  int fd_;
  std::string what_;
  std::string buffer_;
  uint32_t crc_ = static_cast<uint32_t>(::crc32(0L, Z_NULL, 0));
  uint64_t written_ = 0;
};

// The JSON header for `state`; checks every tensor before anything is written.
std::string headerFor(const CheckpointState& state, uint64_t& data_bytes) {
  nlohmann::json tensors = nlohmann::json::array();
  data_bytes = 0;
  for (const auto& [key, tensor] : state.tensors) {
    if (!tensor.defined()) throw ConfigError("checkpoint tensor '" + key + "' is undefined");
    if (tensor.layout() != torch::kStrided) {
      throw ConfigError("checkpoint tensor '" + key + "' is not dense (sparse or other layout); checkpoints cannot store it");
    }
    const DTypeName* dtype = nullptr;
    for (const auto& d : kDTypes) {
      if (d.type == tensor.scalar_type()) dtype = &d;
    }
    if (!dtype) {
      throw ConfigError("checkpoint tensor '" + key + "' has dtype " + std::string(c10::toString(tensor.scalar_type())) +
                        ", which checkpoints cannot store");
    }
    const uint64_t bytes = static_cast<uint64_t>(tensor.numel()) * tensor.element_size();
    tensors.push_back({{"name", key}, {"dtype", dtype->name}, {"shape", tensor.sizes().vec()},
                       {"offset", data_bytes}, {"bytes", bytes}});
    data_bytes += bytes;
  }
  try {
    return nlohmann::json{{"meta", state.meta}, {"tensors", std::move(tensors)}}.dump();
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(std::string("checkpoint meta cannot be written as JSON: ") + e.what());
  }
}

void writeCheckpointFile(int fd, const std::string& what, const std::string& header, uint64_t data_bytes,
                         const CheckpointState& state) {
  CrcFileWriter out(fd, what);
  const uint64_t header_bytes = header.size();
  out.write(kMagic, sizeof(kMagic));
  out.write(&kFormatVersion, sizeof(kFormatVersion));
  out.write(&header_bytes, sizeof(header_bytes));
  out.write(header.data(), header.size());
  for (const auto& [key, tensor] : state.tensors) {
    // One tensor at a time on the CPU: peak memory is one tensor, not the state.
    const torch::Tensor cpu = tensor.detach().to(torch::kCPU).contiguous();
    const size_t bytes = static_cast<size_t>(cpu.numel()) * cpu.element_size();
    if (bytes > 0) out.write(cpu.data_ptr(), bytes);
  }
  const uint64_t payload = out.written();
  if (payload != kPreambleBytes + header_bytes + data_bytes) {
    throw ConfigError(what + ": a tensor changed size while it was being saved");
  }
  const uint32_t crc = out.crc();
  out.write(&payload, sizeof(payload));
  out.write(&crc, sizeof(crc));
  out.write(kEndMagic, sizeof(kEndMagic));
  out.flush();
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

// Removes temporaries left by dead processes of this host (a kill mid-save).
void removeDeadTemporaries(const std::string& dir, const std::string& prefix) {
  const std::string head = "." + prefix + "-", marker = ".dtck.tmp-" + hostName() + "-";
  for (const std::string& name : namesIn(dir).value_or(std::vector<std::string>{})) {
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

// ---- reading ----

struct TensorEntry {
  std::string name;
  torch::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t bytes;
};

struct Layout {
  nlohmann::json meta;
  std::vector<TensorEntry> tensors;
  uint64_t data_bytes = 0;
};

// Parses and checks the header. Throws ConfigError naming `path`.
Layout parseHeader(const std::string& path, const std::string& text) {
  Layout layout;
  try {
    const nlohmann::json header = nlohmann::json::parse(text);
    layout.meta = header.at("meta");
    std::set<std::string> names;
    for (const auto& t : header.at("tensors")) {
      TensorEntry entry;
      entry.name = t.at("name").get<std::string>();
      const std::string where = path + ": tensor '" + entry.name + "'";
      if (!names.insert(entry.name).second) throw ConfigError(where + " appears twice");
      const auto dtype = dtypeFromName(t.at("dtype").get<std::string>());
      if (!dtype) throw ConfigError(where + " has unknown dtype " + t.at("dtype").dump());
      entry.dtype = *dtype;
      entry.shape = t.at("shape").get<std::vector<int64_t>>();
      entry.bytes = t.at("bytes").get<uint64_t>();
      uint64_t expected = c10::elementSize(entry.dtype);
      for (int64_t d : entry.shape) {
        if (d < 0 || __builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected)) {
          throw ConfigError(where + " has an invalid shape " + t.at("shape").dump());
        }
      }
      if (expected != entry.bytes) {
        throw ConfigError(where + " has shape " + t.at("shape").dump() + " of " + std::to_string(expected) +
                          " bytes, but the header says " + std::to_string(entry.bytes));
      }
      if (t.at("offset").get<uint64_t>() != layout.data_bytes) {
        throw ConfigError(where + " is not packed after the one before it (offset " + t.at("offset").dump() +
                          ", expected " + std::to_string(layout.data_bytes) + ")");
      }
      if (__builtin_add_overflow(layout.data_bytes, entry.bytes, &layout.data_bytes)) {
        throw ConfigError(where + " is too large");
      }
      layout.tensors.push_back(std::move(entry));
    }
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path + ": malformed header (" + e.what() + ")");
  }
  return layout;
}

class CheckpointFile {
 public:
  explicit CheckpointFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw errnoError("open", errno, "cannot open checkpoint " + path);
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      ::close(fd_);
      throw errnoError("fstat", err, "cannot stat checkpoint " + path);
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd_);
      throw ConfigError(path + " is a directory, not a checkpoint file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~CheckpointFile() { ::close(fd_); }
  CheckpointFile(const CheckpointFile&) = delete;
  CheckpointFile& operator=(const CheckpointFile&) = delete;

  uint64_t size() const { return size_; }
  void read(uint64_t offset, void* out, size_t size) const {
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
  template <typename T>
  T readValue(uint64_t offset) const {
    T value;
    read(offset, &value, sizeof(T));
    return value;
  }
  std::string readString(uint64_t offset, uint64_t size) const {
    std::string text(size, '\0');
    read(offset, text.data(), size);
    return text;
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The error for a file whose trailer does not match its size: says how long
// the file should be when the header allows it.
ConfigError sizeError(const CheckpointFile& file, const std::string& path, uint64_t header_bytes) {
  const std::string have = std::to_string(file.size()) + " bytes";
  if (header_bytes > file.size() - kPreambleBytes) {
    return ConfigError(path + " is truncated: " + have + ", but its header alone needs " +
                       std::to_string(kPreambleBytes + header_bytes));
  }
  uint64_t expected = 0;
  try {
    const Layout layout = parseHeader(path, file.readString(kPreambleBytes, header_bytes));
    expected = kPreambleBytes + header_bytes + layout.data_bytes + kTrailerBytes;
  } catch (const ConfigError&) {
    return ConfigError(path + " is truncated or corrupt: " + have + ", with neither a valid trailer nor header");
  }
  if (file.size() < expected) {
    return ConfigError(path + " is truncated: " + have + ", expected " + std::to_string(expected));
  }
  if (file.size() > expected) {
    return ConfigError(path + " has " + have + ", expected " + std::to_string(expected) + " (extra bytes at the end)");
  }
  return ConfigError(path + " has a damaged trailer (file is corrupt)");
}

}  // namespace

CheckpointState loadCheckpoint(const std::string& path) {
  const CheckpointFile file(path);
  const uint64_t size = file.size();
  char magic[sizeof(kMagic)] = {0};
  file.read(0, magic, std::min<uint64_t>(size, sizeof(magic)));
  if (std::memcmp(magic, kMagic, std::min<uint64_t>(size, sizeof(kMagic))) != 0) {
    throw ConfigError(path + " is not a dtrain checkpoint (bad magic)");
  }
  if (size < kPreambleBytes) {
    throw ConfigError(path + " is truncated: " + std::to_string(size) + " bytes, shorter than the " +
                      std::to_string(kPreambleBytes) + "-byte preamble");
  }
  const uint32_t version = file.readValue<uint32_t>(8);
  if (version != kFormatVersion) {
    throw ConfigError(path + " has checkpoint format version " + std::to_string(version) + "; this dtrain reads " +
                      std::to_string(kFormatVersion));
  }
  const uint64_t header_bytes = file.readValue<uint64_t>(12);
  const uint64_t payload = size >= kPreambleBytes + kTrailerBytes ? size - kTrailerBytes : 0;
  char end_magic[sizeof(kEndMagic)] = {0};
  if (payload > 0) file.read(size - sizeof(kEndMagic), end_magic, sizeof(end_magic));
  if (payload == 0 || std::memcmp(end_magic, kEndMagic, sizeof(kEndMagic)) != 0 ||
      file.readValue<uint64_t>(payload) != payload) {
    throw sizeError(file, path, header_bytes);
  }

  // The file is as long as its trailer says. Read the tensors straight into
  // their storage while checking the CRC; a header that does not parse is
  // reported only if the CRC holds (otherwise the file is just corrupt).
  uint32_t crc = static_cast<uint32_t>(::crc32(0L, Z_NULL, 0));
  std::optional<ConfigError> header_error;
  CheckpointState state;
  if (header_bytes <= payload - kPreambleBytes) {
    const std::string head = file.readString(0, kPreambleBytes + header_bytes);
    crc = crcUpdate(crc, head.data(), head.size());
    try {
      Layout layout = parseHeader(path, head.substr(kPreambleBytes));
      if (kPreambleBytes + header_bytes + layout.data_bytes != payload) {
        throw ConfigError(path + ": header lists " + std::to_string(layout.data_bytes) + " bytes of tensors, but the " +
                          "file holds " + std::to_string(payload - kPreambleBytes - header_bytes));
      }
      uint64_t offset = kPreambleBytes + header_bytes;
      for (const TensorEntry& entry : layout.tensors) {
        torch::Tensor tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(entry.dtype));
        if (entry.bytes > 0) {
          file.read(offset, tensor.data_ptr(), entry.bytes);
          crc = crcUpdate(crc, tensor.data_ptr(), entry.bytes);
        }
        offset += entry.bytes;
        state.tensors.emplace(entry.name, std::move(tensor));
      }
      state.meta = std::move(layout.meta);
    } catch (const ConfigError& e) {
      header_error = e;
      state = CheckpointState{};
      crc = static_cast<uint32_t>(::crc32(0L, Z_NULL, 0));
    }
  } else {
    header_error = ConfigError(path + ": header length " + std::to_string(header_bytes) + " exceeds the file");
  }
  if (header_error) {
    std::string chunk;
    for (uint64_t at = 0; at < payload; at += chunk.size()) {
      chunk = file.readString(at, std::min<uint64_t>(payload - at, kIoChunk));
      crc = crcUpdate(crc, chunk.data(), chunk.size());
    }
  }
  if (crc != file.readValue<uint32_t>(payload + 8)) {
    throw ConfigError(path + ": checksum mismatch (file is corrupt)");
  }
  if (header_error) throw *header_error;
  return state;
}

Checkpointer::Checkpointer(CheckpointerOptions options) : options_(std::move(options)) {
  if (options_.keep <= 0) {
    throw ConfigError("checkpoints to keep must be > 0, got " + std::to_string(options_.keep));
  }
  if (options_.dir.empty()) throw ConfigError("checkpoint directory is empty");
  const std::string& prefix = options_.prefix;
  if (prefix.empty() || prefix[0] == '.' || prefix.find('/') != std::string::npos) {
    throw ConfigError("checkpoint prefix '" + prefix + "' must be non-empty, have no '/' and not start with '.'");
  }
  if (const int err = makeDirectories(options_.dir)) {
    throw errnoError("mkdir", err, "cannot create checkpoint directory '" + options_.dir + "'");
  }
}

std::string Checkpointer::save(int64_t step, const CheckpointState& state) {
  if (step < 0) throw ConfigError("checkpoint step must be >= 0, got " + std::to_string(step));
  uint64_t data_bytes = 0;
  const std::string header = headerFor(state, data_bytes);
  const std::string name = checkpointName(options_.prefix, step);
  const std::string final_path = options_.dir + "/" + name;
  const std::string temp_path = options_.dir + "/." + name + ".tmp-" + hostName() + "-" + std::to_string(::getpid());
  const std::string what = "writing checkpoint " + final_path;

  int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw errnoError("open", errno, what + ": cannot create " + temp_path);
  try {
    writeCheckpointFile(fd, what, header, data_bytes, state);
    if (::fsync(fd) != 0) throw errnoError("fsync", errno, what);
    const int rc = ::close(fd);
    fd = -1;  // closed even when close() fails
    if (rc != 0) throw errnoError("close", errno, what);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(temp_path.c_str());
    throw;
  }
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_path.c_str());
    throw errnoError("rename", err, what + ": rename from " + temp_path);
  }
  fsyncDir(options_.dir, what);

  const std::vector<std::string> all = list();
  for (size_t i = static_cast<size_t>(options_.keep); i < all.size(); ++i) {
    if (all[i] == final_path) continue;
    if (::unlink(all[i].c_str()) != 0 && errno != ENOENT) {
      DTRAIN_LOG_WARN("cannot remove old checkpoint " << all[i] << ": " << errnoString(errno));
    }
  }
  removeDeadTemporaries(options_.dir, options_.prefix);
  return final_path;
}

std::vector<std::string> Checkpointer::list() const { return listCheckpoints(options_.dir, options_.prefix); }

std::optional<std::pair<std::string, CheckpointState>> Checkpointer::loadLatestValid() const {
  return loadLatestValidIn(options_.dir, options_.prefix);
}

std::optional<std::pair<std::string, CheckpointState>> resolveResume(const std::string& resume,
                                                                      const std::string& dir,
                                                                      const std::string& prefix) {
  if (resume.empty() || resume == "none") return std::nullopt;
  if (resume == "auto") {
    if (dir.empty()) throw ConfigError("resume 'auto' needs a checkpoint directory");
    return loadLatestValidIn(dir, prefix);
  }
  return std::make_pair(resume, loadCheckpoint(resume));
}

}  // namespace dtrain
