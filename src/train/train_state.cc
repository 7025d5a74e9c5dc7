#include "train/train_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <cmath>
#include <mutex>

#include "comm/communicator.h"
#include "common/error.h"
#include "common/log.h"
#include "train/tensor_buffer.h"

namespace dtrain {
namespace {

using TensorMap = std::map<std::string, torch::Tensor>;

std::string slabKey(size_t i) { return "model.slab." + std::to_string(i); }

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

TensorMap modelTensors(const TrainState& state) {
  TensorMap tensors;
  for (size_t i = 0; i < state.dp.slabs().size(); ++i) tensors[slabKey(i)] = state.dp.slabs()[i].param;
  for (const auto& item : state.dp.module()->named_buffers(/*recurse=*/true)) {
    tensors["model.buffer." + item.key()] = item.value();
  }
  return tensors;
}

void requireSame(const torch::Tensor& saved, const torch::Tensor& live, const std::string& key,
                 const std::string& path) {
  if (saved.sizes() != live.sizes() || saved.scalar_type() != live.scalar_type()) {
    throw ConfigError("checkpoint " + path + ": '" + key + "' has shape " + toString(saved.sizes()) + " " +
                      c10::toString(saved.scalar_type()) + ", but this model has " + toString(live.sizes()) + " " +
                      c10::toString(live.scalar_type()) + " (a different --model or data set?)");
  }
}

}  // namespace

TrainPosition nextPosition(int64_t epoch, int64_t batch, int64_t step, int64_t steps_per_epoch) {
  if (batch >= steps_per_epoch) return {epoch + 1, 0, step};
  return {epoch, batch, step};
}

CheckpointState packState(const TrainState& state, const TrainPosition& position, const TrainConfig& config) {
  CheckpointState out;
  out.tensors = modelTensors(state);
  for (auto& [key, tensor] : state.optimizer.stateDict()) out.tensors["optimizer." + key] = tensor;
  for (auto& [key, tensor] : state.scaler.stateDict()) out.tensors[key] = tensor;
  {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    out.tensors["rng.cpu"] = generator.get_state();
  }
  out.meta = {{"step", position.step},
              {"epoch", position.epoch},
              {"batch", position.batch},
              {"world_size", state.ctx.size()},
              {"batch_size", config.batch_size},
              {"model", config.model},
              {"dataset", config.dataset},
              {"optimizer", state.optimizer.name()},
              {"seed", config.seed}};
  return out;
}

TrainPosition resumeFrom(const TrainConfig& config, TrainState& state, int64_t steps_per_epoch) {
  Context& ctx = state.ctx;
  std::optional<std::pair<std::string, CheckpointState>> found;
  std::string error;
  if (ctx.isMain()) {
    try {
      found = resolveResume(config.resume, config.checkpoint_dir);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Rank 0 tells the others whether (and from where) to resume.
  std::vector<double> info(6, 0.0);
  if (ctx.isMain()) {
    info[0] = !error.empty() ? -1 : (found ? 1 : 0);
    if (found) {
      const auto& meta = found->second.meta;
      info[1] = meta.value("step", 0);
      info[2] = meta.value("epoch", 0);
      info[3] = meta.value("batch", 0);
      info[4] = meta.value("world_size", 0);
      info[5] = meta.value("batch_size", 0);
    }
  }
  ctx.allreduceSum(info);
  if (info[0] < 0) {
    if (ctx.isMain()) throw ConfigError("--resume " + config.resume + ": " + error);
    throw ConfigError("--resume " + config.resume + ": rank 0 could not read the checkpoint (see its error)");
  }
  if (info[0] == 0) {
    if (ctx.isMain()) DTRAIN_LOG_INFO("--resume " << config.resume << ": no valid checkpoint in '"
                                                  << config.checkpoint_dir << "', starting from step 0");
    return {};
  }
  TrainPosition position{static_cast<int64_t>(info[2]), static_cast<int64_t>(info[3]), static_cast<int64_t>(info[1])};
  if (static_cast<int64_t>(info[4]) != ctx.size() || static_cast<int64_t>(info[5]) != config.batch_size) {
    if (position.batch != 0) {
      if (ctx.isMain()) {
        DTRAIN_LOG_WARN("checkpoint at step " << position.step << " was written by " << info[4] << " rank(s) x batch "
                                              << info[5] << "; this job has " << ctx.size() << " x "
                                              << config.batch_size << ", so it resumes at the start of epoch "
                                              << position.epoch + 2);
      }
      position = {position.epoch + 1, 0, position.step};
    }
  }

  // Rank 0 loads into its own state; then everything is broadcast.
  TensorMap model = modelTensors(state);
  TensorMap optimizer = state.optimizer.stateDict();
  TensorMap scaler = state.scaler.stateDict();
  if (ctx.isMain()) {
    const std::string& path = found->first;
    const TensorMap& saved = found->second.tensors;
    auto take = [&](TensorMap& live, const std::string& prefix) {
      for (auto& [key, tensor] : live) {
        auto it = saved.find(prefix + key);
        if (it == saved.end()) {
          throw ConfigError("checkpoint " + path + " has no '" + prefix + key + "' (a different --model, "
                            "--optimizer or precision?)");
        }
        requireSame(it->second, tensor, prefix + key, path);
        tensor = it->second;
      }
    };
    take(model, "");
    take(optimizer, "optimizer.");
    take(scaler, "");
    auto rng = saved.find("rng.cpu");
    if (rng != saved.end()) {
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(rng->second);
    }
    DTRAIN_LOG_INFO("resuming from " << path << " (step " << position.step << ", epoch " << position.epoch + 1
                                     << ", batch " << position.batch << ")");
  }
  broadcastMap(model, ctx);
  broadcastMap(optimizer, ctx);
  broadcastMap(scaler, ctx);
  {
    torch::NoGradGuard no_grad;
    TensorMap live = modelTensors(state);
    for (auto& [key, tensor] : live) tensor.copy_(model.at(key));
  }
  state.optimizer.loadStateDict(optimizer);
  state.scaler.loadStateDict(scaler);
  (void)steps_per_epoch;
  return position;
}

}  // namespace dtrain
