// Adapting torch tensors to the collective layer's raw buffers (parallel/ and
// train/; comm/ never sees torch).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <torch/types.h>

#include "comm/types.h"

namespace dtrain {

class Communicator;

// The comm dtype of a tensor dtype; ConfigError naming it when the
// collectives cannot carry it.
DType dtypeOf(torch::ScalarType type);
// A contiguous tensor as a Buffer; `stream` is the CUDA stream the
// collective is ordered after (ignored for CPU tensors).
Buffer bufferOf(const torch::Tensor& tensor, void* stream);
// The current CUDA stream of the tensor's device, or nullptr for a CPU tensor.
void* currentStreamOf(const torch::Tensor& tensor);
// Each tensor flattened to 1-D (for torch::cat).
std::vector<torch::Tensor> flattenAll(const std::vector<torch::Tensor>& tensors);
std::string toString(c10::IntArrayRef sizes);
// Broadcasts `tensors` from rank 0 in place, one collective per dtype
// (packed into one flat tensor unless it already is one); waits for it.
void broadcastTensors(Communicator& comm, const std::vector<torch::Tensor>& tensors,
                      std::chrono::milliseconds timeout);

}  // namespace dtrain
