#include "models/safetensors.h"

#include "common/error.h"
#include "common/files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

namespace dtrain::models {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data are little-endian; a big-endian host would need byte swaps");

using nlohmann::json;
using nlohmann::ordered_json;

struct DtypeName {
  const char* name;
  torch::ScalarType type;
};

constexpr DtypeName kDtypes[] = {
    {"F64", torch::kDouble}, {"F32", torch::kFloat}, {"F16", torch::kHalf},  {"BF16", torch::kBFloat16},
    {"I64", torch::kLong},   {"I32", torch::kInt},   {"I16", torch::kShort}, {"I8", torch::kChar},
    {"U8", torch::kByte},    {"BOOL", torch::kBool}};

const char* dtypeName(torch::ScalarType type, const std::string& path, const std::string& tensor) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  throw ConfigError("cannot write tensor '" + tensor + "' to " + path + ": dtype " +
                    std::string(c10::toString(type)) + " has no safetensors name");
}

std::optional<torch::ScalarType> dtypeOf(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return d.type;
  }
  return std::nullopt;
}

// Closes the file descriptor it owns.
class File {
 public:
  explicit File(int fd) : fd_(fd) {}
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

void writeAll(int fd, const void* data, size_t size, const std::string& path) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = DTRAIN_CHECK_ERRNO(::write(fd, bytes, size), "cannot write " + path);
    bytes += n;
    size -= static_cast<size_t>(n);
  }
}

void readAll(int fd, void* data, size_t size, uint64_t offset, const std::string& path) {
  char* bytes = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = DTRAIN_CHECK_ERRNO(::pread(fd, bytes, size, static_cast<off_t>(offset)), "cannot read " + path);
    if (n == 0) throw ConfigError("safetensors file " + path + " ends early (truncated while being read?)");
    bytes += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

// One tensor's entry of a header, checked.
struct Entry {
  std::string name;
  torch::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

Entry parseEntry(const std::string& name, const json& value, uint64_t data_size, const std::string& path) {
  const std::string where = "safetensors file " + path + ": tensor '" + name + "'";
  if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") || !value.contains("data_offsets")) {
    throw ConfigError(where + " needs dtype, shape and data_offsets");
  }
  const json& dtype = value["dtype"];
  const auto type = dtype.is_string() ? dtypeOf(dtype.get<std::string>()) : std::nullopt;
  if (!type) {
    throw ConfigError(where + " has unknown dtype " + dtype.dump() +
                      " (expected F64, F32, F16, BF16, I64, I32, I16, I8, U8 or BOOL)");
  }
  const json& shape = value["shape"];
  const json& offsets = value["data_offsets"];
  const bool shape_ok = shape.is_array() && std::all_of(shape.begin(), shape.end(), [](const json& s) {
                          return s.is_number_unsigned() || (s.is_number_integer() && s.get<int64_t>() >= 0);
                        });
  if (!shape_ok) throw ConfigError(where + " shape " + shape.dump() + " is not a list of sizes");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    throw ConfigError(where + " data_offsets " + offsets.dump() + " is not [begin, end]");
  }
  Entry e{name, *type, shape.get<std::vector<int64_t>>(), offsets[0].get<uint64_t>(), offsets[1].get<uint64_t>()};
  if (e.begin > e.end || e.end > data_size) {
    throw ConfigError(where + " data_offsets " + offsets.dump() + " lie outside the " + std::to_string(data_size) +
                      " data bytes");
  }
  uint64_t bytes = c10::elementSize(e.type);
  for (int64_t s : e.shape) bytes *= static_cast<uint64_t>(s);
  if (bytes != e.end - e.begin) {
    throw ConfigError(where + " holds " + std::to_string(e.end - e.begin) + " bytes but dtype " + dtype.dump() +
                      " x shape " + shape.dump() + " needs " + std::to_string(bytes));
  }
  return e;
}

// The entries in data order, checked to tile the data without gaps or overlaps.
std::vector<Entry> parseHeader(const json& header, uint64_t data_size, const std::string& path,
                               std::map<std::string, std::string>& metadata) {
  if (!header.is_object()) throw ConfigError("safetensors file " + path + ": header is not a JSON object");
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name != "__metadata__") {
      entries.push_back(parseEntry(name, value, data_size, path));
      continue;
    }
    if (!value.is_object()) throw ConfigError("safetensors file " + path + ": __metadata__ is not an object");
    for (const auto& [key, text] : value.items()) {
      if (!text.is_string()) {
        throw ConfigError("safetensors file " + path + ": __metadata__ '" + key + "' is not a string");
      }
      metadata[key] = text.get<std::string>();
    }
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    if (e.begin != expected) {
      throw ConfigError("safetensors file " + path + ": tensor '" + e.name + "' starts at byte " +
                        std::to_string(e.begin) + " of the data, expected " + std::to_string(expected) +
                        " (tensors must tile the data without gaps or overlaps)");
    }
    expected = e.end;
  }
  if (expected != data_size) {
    throw ConfigError("safetensors file " + path + ": tensors cover " + std::to_string(expected) + " of its " +
                      std::to_string(data_size) + " data bytes");
  }
  return entries;
}

// The header's length field and JSON, validated against the file's size.
json readHeader(int fd, uint64_t file_size, const std::string& path, uint64_t& header_size) {
  if (file_size < 8) {
    throw ConfigError("safetensors file " + path + " has " + std::to_string(file_size) +
                      " bytes, fewer than its 8-byte header length");
  }
  readAll(fd, &header_size, 8, 0, path);
  if (header_size > file_size - 8) {
    throw ConfigError("safetensors file " + path + ": header length " + std::to_string(header_size) +
                      " exceeds the " + std::to_string(file_size - 8) + " bytes that follow it");
  }
  std::string text(header_size, '\0');
  readAll(fd, text.data(), header_size, 8, path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw ConfigError("safetensors file " + path + ": header is not valid JSON (" + e.what() + ")");
  }
}

// Parameters, then buffers, in the module's registration order.
NamedTensors stateTensors(const torch::nn::Module& module) {
  NamedTensors state;
  for (const auto& p : module.named_parameters()) state.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers()) state.emplace_back(b.key(), b.value());
  return state;
}

}  // namespace

void writeSafetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__" || header.contains(name)) {
      throw ConfigError("cannot write " + path + ": tensor name '" + name + "' is reserved or repeated");
    }
    const uint64_t bytes = static_cast<uint64_t>(tensor.numel()) * tensor.element_size();
    header[name] = {{"dtype", dtypeName(tensor.scalar_type(), path, name)},
                    {"shape", tensor.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Readers that map the file find the data 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  const File file(DTRAIN_CHECK_ERRNO(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644),
                                     "cannot create " + path));
  const uint64_t header_size = text.size();
  writeAll(file.fd(), &header_size, 8, path);
  writeAll(file.fd(), text.data(), text.size(), path);
  for (const auto& [name, tensor] : tensors) {
    const torch::Tensor data = tensor.detach().to(torch::kCPU).contiguous();
    writeAll(file.fd(), data.data_ptr(), static_cast<size_t>(data.numel()) * data.element_size(), path);
  }
}

namespace {

// A safetensors file opened and its header parsed: what reading it and
// mapping it share.
struct OpenedSafetensors {
  FileDescriptor file;
  uint64_t file_size = 0;
  uint64_t data_start = 0;  // the data bytes' offset in the file
  std::vector<Entry> entries;
};

OpenedSafetensors openSafetensors(const std::string& path, std::map<std::string, std::string>& metadata) {
  struct stat info {};
  OpenedSafetensors opened{openRegularFile(path, "safetensors file", &info)};
  opened.file_size = static_cast<uint64_t>(info.st_size);
  uint64_t header_size = 0;
  const json header = readHeader(opened.file.get(), opened.file_size, path, header_size);
  opened.data_start = 8 + header_size;
  opened.entries = parseHeader(header, opened.file_size - opened.data_start, path, metadata);
  return opened;
}

}  // namespace

SafetensorsContents readSafetensors(const std::string& path) {
  SafetensorsContents contents;
  const OpenedSafetensors opened = openSafetensors(path, contents.metadata);
  for (const Entry& e : opened.entries) {
    torch::Tensor tensor = torch::empty(e.shape, torch::TensorOptions().dtype(e.type));
    readAll(opened.file.get(), tensor.data_ptr(), e.end - e.begin, opened.data_start + e.begin, path);
    contents.tensors.emplace_back(e.name, std::move(tensor));
  }
  return contents;
}

SafetensorsContents mapSafetensors(const std::string& path) {
  SafetensorsContents contents;
  const OpenedSafetensors opened = openSafetensors(path, contents.metadata);
  const uint64_t file_size = opened.file_size, data_start = opened.data_start;
  const std::vector<Entry>& entries = opened.entries;
  if (file_size == data_start) {  // no data bytes: nothing to map
    for (const Entry& e : entries) {
      contents.tensors.emplace_back(e.name, torch::empty(e.shape, torch::TensorOptions().dtype(e.type)));
    }
    return contents;
  }
  void* base = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, opened.file.get(), 0);
  if (base == MAP_FAILED) throw errnoError("mmap", errno, "cannot map " + path);
  const std::shared_ptr<void> mapping(base, [file_size](void* p) { ::munmap(p, file_size); });
  char* data = static_cast<char*>(base) + data_start;
  for (const Entry& e : entries) {
    torch::Tensor tensor = torch::from_blob(data + e.begin, e.shape, [mapping](void*) {},
                                            torch::TensorOptions().dtype(e.type));
    contents.tensors.emplace_back(e.name, std::move(tensor));
  }
  return contents;
}

void saveModuleSafetensors(const torch::nn::Module& module, const std::string& path,
                           const std::map<std::string, std::string>& metadata) {
  writeSafetensors(path, stateTensors(module), metadata);
}

std::map<std::string, std::string> loadModuleSafetensors(torch::nn::Module& module, const std::string& path) {
  SafetensorsContents contents = readSafetensors(path);
  const NamedTensors ordered = stateTensors(module);
  std::map<std::string, torch::Tensor> state(ordered.begin(), ordered.end());
  for (const auto& [name, tensor] : contents.tensors) {
    auto it = state.find(name);
    if (it == state.end()) throw ConfigError(path + " holds tensor '" + name + "', which the model does not have");
    if (!it->second.sizes().equals(tensor.sizes())) {
      throw ConfigError(path + ": tensor '" + name + "' has shape " + c10::str(tensor.sizes()) +
                        ", the model's has " + c10::str(it->second.sizes()));
    }
  }
  std::set<std::string> in_file;
  for (const auto& item : contents.tensors) in_file.insert(item.first);
  for (const auto& [name, target] : ordered) {
    if (!in_file.count(name)) throw ConfigError(path + " lacks the model's tensor '" + name + "'");
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : contents.tensors) state[name].copy_(tensor);
  return contents.metadata;
}

}  // namespace dtrain::models
