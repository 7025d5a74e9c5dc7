#include "train/job_checkpoint_legacy.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "train/nonfinite_tally.h"
#include "parallel/tensor_buffer.h"

namespace dtrain {
namespace {

using TensorMap = std::map<std::string, torch::Tensor>;

// Broadcasts every tensor of the map from rank 0, in key order (every rank
// holds the same keys and shapes: the same model, optimizer and scaler).
void broadcastMap(TensorMap& tensors, Context& ctx) {
  if (ctx.size() == 1) return;
  for (auto& [key, tensor] : tensors) {
    torch::Tensor staged = tensor.to(ctx.device()).contiguous().clone();
    BroadcastOptions options;
    options.timeout = ctx.collectiveTimeout();
    ctx.communicator()->broadcast(bufferOf(staged, currentStreamOf(staged)), options)->wait(ctx.collectiveTimeout());
    tensor = staged.to(tensor.device());
  }
}

// The model's parameters by name (gathered under ZeRO-3: a collective) and buffers.
TensorMap modelTensors(DataParallel& dp) {
  TensorMap tensors;
  const std::vector<torch::Tensor> values = dp.fullParameters();
  std::unordered_map<const void*, size_t> index;
  for (size_t i = 0; i < dp.parameters().size(); ++i) index[dp.parameters()[i].unsafeGetTensorImpl()] = i;
  for (const auto& item : dp.module()->named_parameters(/*recurse=*/true)) {
    auto it = index.find(item.value().unsafeGetTensorImpl());
    tensors["model.param." + item.key()] = it == index.end() ? item.value() : values[it->second];
  }
  for (const auto& item : dp.module()->named_buffers(/*recurse=*/true)) {
    tensors["model.buffer." + item.key()] = item.value();
  }
  return tensors;
}

// Copies every live tensor's saved value into `live` (rank 0).
void takeSaved(TensorMap& live, const TensorMap& saved, const std::string& prefix, const std::string& path) {
  for (auto& [key, tensor] : live) {
    auto it = saved.find(prefix + key);
    if (it == saved.end()) {
      throw ConfigError("checkpoint " + path + " has no '" + prefix + key +
                        "' (a different --model, --optimizer or precision?)");
    }
    const torch::Tensor& value = it->second;
    if (value.sizes() != tensor.sizes() || value.scalar_type() != tensor.scalar_type()) {
      throw ConfigError("checkpoint " + path + ": '" + prefix + key + "' has shape " + toString(value.sizes()) + " " +
                        c10::toString(value.scalar_type()) + ", but this model has " + toString(tensor.sizes()) + " " +
                        c10::toString(tensor.scalar_type()) + " (a different --model or data set?)");
    }
    tensor = value;
  }
}

// The saved CPU generator state, set on this process (rank 0's, as it was
// saved). libtorch refuses a state of another size or an invalid one with
// its error and a stack trace; this names the checkpoint and the tensor.
void takeSavedRng(const CheckpointState& state, const std::string& path) {
  auto rng = state.tensors.find("rng.cpu");
  if (rng == state.tensors.end()) return;
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  try {
    generator.set_state(rng->second);
  } catch (const c10::Error& e) {
    throw ConfigError("checkpoint " + path + ": tensor 'rng.cpu' does not load: " + e.what_without_backtrace());
  }
}

// Rank 0's check of the saved state against the live one, agreed on by
// every rank (so that all throw, none waits in a broadcast).
void takeAllSaved(Context& ctx, const std::string& path, const CheckpointState* state, bool allow_nonfinite,
                  TensorMap& model, TensorMap& optimizer, TensorMap& scaler) {
  std::vector<double> failed{0};
  std::exception_ptr error;
  if (state != nullptr) {
    try {
      takeSaved(model, state->tensors, "", path);
      takeSaved(optimizer, state->tensors, "optimizer.", path);
      takeSaved(scaler, state->tensors, "", path);
      NonFiniteTally tally;
      for (const auto& [name, tensor] : state->tensors) tally.add(name, tensor);
      tally.check(path, allow_nonfinite);
      takeSavedRng(*state, path);
    } catch (const ConfigError&) {
      error = std::current_exception();
      failed[0] = 1;
    }
  }
  ctx.allreduceSum(failed);
  if (error) std::rethrow_exception(error);
  if (failed[0] > 0) throw ConfigError("checkpoint " + path + " does not fit this job (rank 0 says why)");
}

}  // namespace

bool isSlabLayoutCheckpoint(const nlohmann::json& meta) { return !meta.contains("tensor_layout"); }

void restoreSlabLayoutCheckpoint(TrainingJob& job, const std::string& path, const CheckpointState* state,
                                 bool allow_nonfinite) {
  if (job.plan().tp > 1) {
    throw ConfigError("checkpoint " + path + " holds the optimizer state per slab (an older dtrain's single file), "
                      "which --tp " + std::to_string(job.plan().tp) + " cannot split; resume it with --tp 1, "
                      "save a checkpoint, and resume that one");
  }
  Context& ctx = job.context();
  DataParallel& dp = job.dataParallel();
  TensorMap model = modelTensors(dp);
  TensorMap optimizer = job.optimizer().stateDict();
  TensorMap scaler = job.scaler().stateDict();
  takeAllSaved(ctx, path, state, allow_nonfinite, model, optimizer, scaler);
  broadcastMap(model, ctx);
  broadcastMap(optimizer, ctx);
  broadcastMap(scaler, ctx);
  // By parameter, in DataParallel's order (a tied weight has two names).
  std::unordered_map<const void*, torch::Tensor> by_impl;
  for (const auto& item : dp.module()->named_parameters(/*recurse=*/true)) {
    by_impl[item.value().unsafeGetTensorImpl()] = model.at("model.param." + item.key());
  }
  std::vector<torch::Tensor> values;
  for (const torch::Tensor& p : dp.parameters()) values.push_back(by_impl.at(p.unsafeGetTensorImpl()));
  dp.loadFullParameters(values);
  {
    torch::NoGradGuard no_grad;
    for (const auto& item : dp.module()->named_buffers(/*recurse=*/true)) {
      item.value().copy_(model.at("model.buffer." + item.key()));
    }
  }
  job.optimizer().loadStateDict(optimizer);
  job.scaler().loadStateDict(scaler);
}

}  // namespace dtrain
