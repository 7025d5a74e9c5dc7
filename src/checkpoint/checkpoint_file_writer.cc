#include "checkpoint/checkpoint_file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include <torch/torch.h>

#include "checkpoint/checkpoint_format.h"
#include "common/error.h"

namespace dtrain {
namespace {

using namespace checkpoint_format;

// Device tensors reach the host through a staging buffer of this size.
constexpr int64_t kDeviceChunkBytes = int64_t{64} << 20;

struct TorchDtype {
  torch::ScalarType torch;
  CheckpointDtype stored;
};
constexpr TorchDtype kTorchDtypes[] = {
    {torch::kFloat, CheckpointDtype::kFloat32}, {torch::kDouble, CheckpointDtype::kFloat64},
    {torch::kHalf, CheckpointDtype::kFloat16},  {torch::kBFloat16, CheckpointDtype::kBFloat16},
    {torch::kLong, CheckpointDtype::kInt64},    {torch::kInt, CheckpointDtype::kInt32},
    {torch::kShort, CheckpointDtype::kInt16},   {torch::kChar, CheckpointDtype::kInt8},
    {torch::kByte, CheckpointDtype::kUInt8},    {torch::kBool, CheckpointDtype::kBool}};

std::string shapeText(const std::vector<int64_t>& shape) { return nlohmann::json(shape).dump(); }

uint64_t bytesOf(const TensorToWrite& t) {
  uint64_t bytes = c10::elementSize(t.dtype);
  for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
  return bytes;
}

// The JSON header; checks every tensor's declaration before anything is written.
std::string headerFor(const nlohmann::json& meta, const std::vector<TensorToWrite>& tensors, uint64_t& data_bytes) {
  nlohmann::json list = nlohmann::json::array();
  std::set<std::string> names;
  data_bytes = 0;
  for (const TensorToWrite& t : tensors) {
    const std::optional<CheckpointDtype> dtype = checkpointDtypeOf(t.dtype);
    if (!dtype) {
      throw ConfigError("checkpoint tensor '" + t.name + "' has dtype " + std::string(c10::toString(t.dtype)) +
                        ", which checkpoints cannot store");
    }
    if (!names.insert(t.name).second) throw ConfigError("checkpoint tensor '" + t.name + "' appears twice");
    for (int64_t d : t.shape) {
      if (d < 0) throw ConfigError("checkpoint tensor '" + t.name + "' has a negative size " + shapeText(t.shape));
    }
    const uint64_t bytes = bytesOf(t);
    list.push_back({{"name", t.name}, {"dtype", checkpointDtypeName(*dtype)}, {"shape", t.shape}, {"offset", data_bytes}, {"bytes", bytes}});
    data_bytes += bytes;
  }
  try {
    return nlohmann::json{{"meta", meta}, {"tensors", std::move(list)}}.dump();
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(std::string("checkpoint meta cannot be written as JSON: ") + e.what());
  }
}

// Writes one fetched tensor's bytes: CPU tensors straight from their
// memory, device tensors through a host buffer (pinned for CUDA), a chunk
// at a time, so a 1 GB slice never needs 1 GB of host memory.
void writeTensorBytes(CrcFileWriter& out, const TensorToWrite& spec, const std::string& what,
                      torch::Tensor& staging) {
  torch::Tensor t = spec.fetch();
  if (!t.defined() || t.layout() != torch::kStrided) {
    throw ConfigError(what + ": tensor '" + spec.name + "' is undefined or not dense");
  }
  if (t.scalar_type() != spec.dtype || t.sizes().vec() != spec.shape) {
    throw ConfigError(what + ": tensor '" + spec.name + "' is " + shapeText(t.sizes().vec()) + " " +
                      c10::toString(t.scalar_type()) + ", declared " + shapeText(spec.shape) + " " +
                      c10::toString(spec.dtype) + " (it changed while it was being saved?)");
  }
  if (t.numel() == 0) return;
  t = t.detach().contiguous().view({-1});
  const int64_t element = static_cast<int64_t>(t.element_size());
  if (t.device().is_cpu()) {
    out.write(t.data_ptr(), static_cast<size_t>(t.numel() * element));
    return;
  }
  const int64_t chunk = std::max<int64_t>(1, kDeviceChunkBytes / element);
  if (!staging.defined() || staging.numel() < kDeviceChunkBytes) {
    staging = torch::empty({kDeviceChunkBytes}, torch::TensorOptions().dtype(torch::kByte).pinned_memory(t.is_cuda()));
  }
  for (int64_t at = 0; at < t.numel(); at += chunk) {
    const int64_t n = std::min(chunk, t.numel() - at);
    torch::Tensor host = staging.narrow(0, 0, n * element).view(t.scalar_type());
    host.copy_(t.narrow(0, at, n));
    out.write(host.data_ptr(), static_cast<size_t>(n * element));
  }
}

WrittenFile writeContents(int fd, const std::string& what, const std::string& header, uint64_t data_bytes,
                          const std::vector<TensorToWrite>& tensors) {
  CrcFileWriter out(fd, what);
  const uint64_t header_bytes = header.size();
  out.write(kMagic, sizeof(kMagic));
  out.write(&kFormatVersion, sizeof(kFormatVersion));
  out.write(&header_bytes, sizeof(header_bytes));
  out.write(header.data(), header.size());
  torch::Tensor staging;
  for (const TensorToWrite& t : tensors) writeTensorBytes(out, t, what, staging);
  const uint64_t payload = out.written();
  if (payload != kPreambleBytes + header_bytes + data_bytes) {
    throw ConfigError(what + ": a tensor changed size while it was being saved");
  }
  const uint32_t crc = out.crc();
  out.write(&payload, sizeof(payload));
  out.write(&crc, sizeof(crc));
  out.write(kEndMagic, sizeof(kEndMagic));
  out.flush();
  return {payload + kTrailerBytes, crc};
}

}  // namespace

std::optional<CheckpointDtype> checkpointDtypeOf(torch::ScalarType type) {
  for (const auto& d : kTorchDtypes) {
    if (d.torch == type) return d.stored;
  }
  return std::nullopt;
}

const char* checkpointDtypeName(torch::ScalarType type) {
  const std::optional<CheckpointDtype> stored = checkpointDtypeOf(type);
  return stored ? checkpointDtypeName(*stored) : nullptr;
}

torch::ScalarType torchDtypeOf(CheckpointDtype dtype) {
  for (const auto& d : kTorchDtypes) {
    if (d.stored == dtype) return d.torch;
  }
  return torch::kByte;
}

WrittenFile writeCheckpointFile(const std::string& path, const nlohmann::json& meta,
                                const std::vector<TensorToWrite>& tensors) {
  uint64_t data_bytes = 0;
  const std::string header = headerFor(meta, tensors, data_bytes);
  const std::string dir = directoryOf(path);
  const std::string temp_path = dir + "/" + checkpointTemporaryName(path.substr(path.rfind('/') + 1));
  const std::string what = "writing checkpoint " + path;

  int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw errnoError("open", errno, what + ": cannot create " + temp_path);
  WrittenFile written;
  try {
    written = writeContents(fd, what, header, data_bytes, tensors);
    if (::fsync(fd) != 0) throw errnoError("fsync", errno, what);
    const int rc = ::close(fd);
    fd = -1;  // closed even when close() fails
    if (rc != 0) throw errnoError("close", errno, what);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(temp_path.c_str());
    throw;
  }
  if (::rename(temp_path.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_path.c_str());
    throw errnoError("rename", err, what + ": rename from " + temp_path);
  }
  fsyncDir(dir, what);
  return written;
}

std::vector<std::pair<std::string, torch::Tensor>> readAllTensors(const CheckpointFile& file) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  file.readAll([&](const CheckpointFileEntry& entry) {
    out.emplace_back(entry.name, torch::empty(entry.shape, torch::TensorOptions().dtype(torchDtypeOf(entry.dtype))));
    return out.back().second.data_ptr();
  });
  return out;
}

}  // namespace dtrain
