// Vocabulary of the collective layer (comm/): raw buffers, dtypes, reduce
// ops, and one options struct per collective, each with its own timeout.
// No torch here: train/ adapts tensors to Buffer.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace dtrain {

enum class DType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8 };
enum class ReduceOp { kSum, kAvg, kMin, kMax, kProd };
enum class DeviceType { kCpu, kCuda };

size_t dtypeSize(DType dtype);
// nccl-tests' spellings: float, double, half, bfloat16, int32, int64, uint8.
const char* dtypeName(DType dtype);
// Accepts nccl-tests' names and aliases (f32, float32, fp16, bf16, i32, ...);
// ConfigError listing the valid names otherwise.
DType parseDType(const std::string& text);
// sum, avg, min, max, prod.
const char* reduceOpName(ReduceOp op);
ReduceOp parseReduceOp(const std::string& text);

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;
  static Device cpu() { return {DeviceType::kCpu, 0}; }
  static Device cuda(int index) { return {DeviceType::kCuda, index}; }
};

// A view of `count` elements of `dtype` at `data`. For CUDA buffers `stream`
// is the cudaStream_t the caller orders the collective after (nullptr: the
// communicator's own stream, which waits on the legacy default stream).
struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::kFloat32;
  Device device = Device::cpu();
  void* stream = nullptr;

  size_t bytes() const { return count * dtypeSize(dtype); }
};

using Milliseconds = std::chrono::milliseconds;
inline constexpr Milliseconds kDefaultCollectiveTimeout{std::chrono::minutes(10)};

struct AllreduceOptions {
  ReduceOp op = ReduceOp::kSum;
  Milliseconds timeout = kDefaultCollectiveTimeout;
};
struct BroadcastOptions {
  int root = 0;
  Milliseconds timeout = kDefaultCollectiveTimeout;
};
struct AllgatherOptions {
  Milliseconds timeout = kDefaultCollectiveTimeout;
};
struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::kSum;
  Milliseconds timeout = kDefaultCollectiveTimeout;
};
struct ReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  Milliseconds timeout = kDefaultCollectiveTimeout;
};
struct GatherOptions {
  int root = 0;
  Milliseconds timeout = kDefaultCollectiveTimeout;
};
struct ScatterOptions {
  int root = 0;
  Milliseconds timeout = kDefaultCollectiveTimeout;
};
struct AlltoallOptions {
  Milliseconds timeout = kDefaultCollectiveTimeout;
};
struct BarrierOptions {
  Milliseconds timeout = kDefaultCollectiveTimeout;
};
struct SendRecvOptions {
  uint32_t tag = 0;
  Milliseconds timeout = kDefaultCollectiveTimeout;
};

}  // namespace dtrain
