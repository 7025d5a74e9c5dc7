#include "comm/nccl/buffer_checks.h"

#include "common/error.h"

namespace dtrain {

void checkNcclBuffer(const Buffer& buffer, int device, const std::string& op, const std::string& role) {
  if (buffer.device.type != DeviceType::kCuda) {
    throw ConfigError("nccl needs CUDA buffers; use the gloo backend (the " + role + " of " + op +
                      " is in CPU memory)");
  }
  if (buffer.device.index != device) {
    throw ConfigError("nccl " + op + ": the " + role + " is on cuda:" + std::to_string(buffer.device.index) +
                      " but this communicator uses cuda:" + std::to_string(device));
  }
  if (buffer.data == nullptr && buffer.count > 0) {
    throw ConfigError("nccl " + op + ": the " + role + " has " + std::to_string(buffer.count) +
                      " elements but a null data pointer");
  }
}

void checkSameDType(const Buffer& send, const Buffer& recv, const std::string& op) {
  if (send.dtype != recv.dtype) {
    throw ConfigError("nccl " + op + ": the send buffer is " + dtypeName(send.dtype) + " but the recv buffer is " +
                      dtypeName(recv.dtype) + "; they must match");
  }
}

void checkCount(size_t actual, size_t expected, const std::string& op, const std::string& what) {
  if (actual != expected) {
    throw ConfigError("nccl " + op + ": size mismatch, expected " + what + " = " + std::to_string(expected) +
                      " elements, got " + std::to_string(actual));
  }
}

void* commonStream(const Buffer& send, const Buffer& recv, const std::string& op) {
  if (send.stream != nullptr && recv.stream != nullptr && send.stream != recv.stream) {
    throw ConfigError("nccl " + op + ": the send and recv buffers name different CUDA streams; "
                      "give both the same stream (or one of them none)");
  }
  return send.stream != nullptr ? send.stream : recv.stream;
}

}  // namespace dtrain
