#include "parallel/tensor_buffer.h"

#include <torch/torch.h>

#include <map>

#include "comm/communicator.h"
#include "common/error.h"

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace dtrain {

DType dtypeOf(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat: return DType::kFloat32;
    case torch::kDouble: return DType::kFloat64;
    case torch::kHalf: return DType::kFloat16;
    case torch::kBFloat16: return DType::kBFloat16;
    case torch::kInt: return DType::kInt32;
    case torch::kLong: return DType::kInt64;
    case torch::kByte: return DType::kUInt8;
    default:
      throw ConfigError(std::string("tensor dtype ") + c10::toString(type) +
                        " cannot be all-reduced; expected float32, float64, float16, bfloat16, int32, int64 "
                        "or uint8");
  }
}

Buffer bufferOf(const torch::Tensor& tensor, void* stream) {
  if (!tensor.is_contiguous()) throw ConfigError("internal: a collective buffer must be contiguous");
  Buffer buffer;
  buffer.data = tensor.data_ptr();
  buffer.count = static_cast<size_t>(tensor.numel());
  buffer.dtype = dtypeOf(tensor.scalar_type());
  if (tensor.is_cuda()) {
    buffer.device = Device::cuda(tensor.device().index());
    buffer.stream = stream;
  }
  return buffer;
}

void* currentStreamOf(const torch::Tensor& tensor) {
#if DTRAIN_TORCH_CUDA
  if (tensor.is_cuda()) return c10::cuda::getCurrentCUDAStream(tensor.device().index()).stream();
#endif
  return nullptr;
}

std::vector<torch::Tensor> flattenAll(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> flat;
  flat.reserve(tensors.size());
  for (const torch::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  return flat;
}

std::string toString(c10::IntArrayRef sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + "]";
}

void broadcastTensors(Communicator& comm, const std::vector<torch::Tensor>& tensors,
                      std::chrono::milliseconds timeout) {
  if (comm.size() == 1 || tensors.empty()) return;
  torch::NoGradGuard no_grad;
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const torch::Tensor& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, group] : by_dtype) {
    const bool single_flat = group.size() == 1 && group[0].dim() == 1 && group[0].is_contiguous();
    torch::Tensor flat = single_flat ? group[0] : torch::cat(flattenAll(group));
    BroadcastOptions options;
    options.root = 0;
    options.timeout = timeout;
    comm.broadcast(bufferOf(flat, currentStreamOf(flat)), options)->wait(timeout);
    if (single_flat) continue;
    int64_t offset = 0;
    for (const torch::Tensor& t : group) {
      t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
}

}  // namespace dtrain
