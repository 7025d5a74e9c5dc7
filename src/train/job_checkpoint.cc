#include "train/job_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <cmath>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "common/log.h"
#include "train/tensor_buffer.h"

namespace dtrain {
namespace {

using TensorMap = std::map<std::string, torch::Tensor>;

// What rank 0 tells the others about --resume. It travels as a vector that
// only rank 0 fills and every rank sums (all values are small integers,
// exact in a double).
struct ResumeRecord {
  enum class Outcome { kNothing = 0, kFound = 1, kConfigError = 2, kIoError = 3 };
  Outcome outcome = Outcome::kNothing;
  TrainPosition position;
  int64_t world_size = 0;  // of the job that wrote the checkpoint
  int64_t batch_size = 0;

  std::vector<double> encode() const {
    return {static_cast<double>(outcome),         static_cast<double>(position.epoch),
            static_cast<double>(position.batch),  static_cast<double>(position.step),
            static_cast<double>(world_size),      static_cast<double>(batch_size)};
  }
  static ResumeRecord decode(const std::vector<double>& v) {
    auto at = [&](size_t i) { return static_cast<int64_t>(std::llround(v.at(i))); };
    ResumeRecord r;
    r.outcome = static_cast<Outcome>(at(0));
    r.position = {at(1), at(2), at(3)};
    r.world_size = at(4);
    r.batch_size = at(5);
    return r;
  }
};

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

// The model's parameters by name (views into DataParallel's slabs, so a
// checkpoint does not depend on how the slabs are laid out; with sharded
// parameters gathered from every rank's shards, a collective) and buffers.
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

void requireSame(const torch::Tensor& saved, const torch::Tensor& live, const std::string& key,
                 const std::string& path) {
  if (saved.sizes() != live.sizes() || saved.scalar_type() != live.scalar_type()) {
    throw ConfigError("checkpoint " + path + ": '" + key + "' has shape " + toString(saved.sizes()) + " " +
                      c10::toString(saved.scalar_type()) + ", but this model has " + toString(live.sizes()) + " " +
                      c10::toString(live.scalar_type()) + " (a different --model or data set?)");
  }
}

// Copies every live tensor's saved value into `live` (rank 0).
void takeSaved(TensorMap& live, const TensorMap& saved, const std::string& prefix, const std::string& path) {
  for (auto& [key, tensor] : live) {
    auto it = saved.find(prefix + key);
    if (it == saved.end()) {
      throw ConfigError("checkpoint " + path + " has no '" + prefix + key +
                        "' (a different --model, --optimizer or precision?)");
    }
    requireSame(it->second, tensor, prefix + key, path);
    tensor = it->second;
  }
}

// Rank 0: resolves --resume. A failure is kept in `error` (and named by the
// outcome) so that every rank learns of it before anyone throws.
ResumeRecord findCheckpoint(const std::string& resume, const std::string& dir,
                            std::optional<std::pair<std::string, CheckpointState>>& found,
                            std::exception_ptr& error) {
  ResumeRecord record;
  try {
    found = resolveResume(resume, dir);
  } catch (const ConfigError&) {
    error = std::current_exception();
    record.outcome = ResumeRecord::Outcome::kConfigError;
    return record;
  } catch (const std::exception&) {
    error = std::current_exception();
    record.outcome = ResumeRecord::Outcome::kIoError;
    return record;
  }
  if (found) {
    const auto& meta = found->second.meta;
    record.outcome = ResumeRecord::Outcome::kFound;
    record.position = {meta.value("epoch", int64_t{0}), meta.value("batch", int64_t{0}),
                       meta.value("step", int64_t{0})};
    record.world_size = meta.value("world_size", int64_t{0});
    record.batch_size = meta.value("batch_size", int64_t{0});
  }
  return record;
}

void restoreCpuGenerator(const TensorMap& saved) {
  auto rng = saved.find("rng.cpu");
  if (rng == saved.end()) return;
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(rng->second);
}

}  // namespace

TrainPosition nextPosition(int64_t epoch, int64_t batch, int64_t step, int64_t steps_per_epoch) {
  if (batch >= steps_per_epoch) return {epoch + 1, 0, step};
  return {epoch, batch, step};
}

JobCheckpoint::JobCheckpoint(TrainingJob& job, const CheckpointOptions& options, CheckpointIdentity identity)
    : job_(job), options_(options), identity_(std::move(identity)) {
  if (enabled() && job_.context().isMain()) {
    CheckpointerOptions o;
    o.dir = options_.dir;
    o.keep = options_.keep;
    checkpointer_ = std::make_unique<Checkpointer>(o);
  }
}

CheckpointState JobCheckpoint::pack(const TrainPosition& position, TensorMap model,
                                    const TensorMap& optimizer) const {
  CheckpointState out;
  out.tensors = std::move(model);
  for (auto& [key, tensor] : optimizer) out.tensors["optimizer." + key] = tensor;
  for (auto& [key, tensor] : job_.scaler().stateDict()) out.tensors[key] = tensor;
  {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    out.tensors["rng.cpu"] = generator.get_state();
  }
  out.meta = {{"step", position.step},
              {"epoch", position.epoch},
              {"batch", position.batch},
              {"world_size", job_.context().size()},
              {"batch_size", identity_.batch_size},
              {"model", identity_.model},
              {"dataset", identity_.dataset},
              {"optimizer", job_.optimizer().name()},
              {"seed", identity_.seed}};
  if (!identity_.model_config.empty()) out.meta["model_config"] = identity_.model_config;
  if (!identity_.tokenizer.empty()) {
    out.meta["tokenizer"] = {{"kind", identity_.tokenizer}, {"path", identity_.tokenizer_path}};
  }
  return out;
}

void JobCheckpoint::save(const TrainPosition& position) {
  if (!enabled()) return;
  job_.dataParallel().syncBuffers();
  // Every rank asks: sharded parameters and a sharded optimizer gather
  // their state collectively.
  TensorMap model = modelTensors(job_.dataParallel());
  const TensorMap optimizer = job_.optimizer().stateDict();
  if (checkpointer_) {
    const std::string path = checkpointer_->save(position.step, pack(position, std::move(model), optimizer));
    DTRAIN_LOG_DEBUG("checkpoint " << path);
  }
}

TrainPosition JobCheckpoint::resume() {
  Context& ctx = job_.context();
  const std::string& resume = options_.resume;
  if (resume.empty() || resume == "none") return {};
  std::optional<std::pair<std::string, CheckpointState>> found;
  std::exception_ptr error;
  ResumeRecord record = ctx.isMain() ? findCheckpoint(resume, options_.dir, found, error) : ResumeRecord{};
  std::vector<double> wire = record.encode();
  ctx.allreduceSum(wire);
  record = ResumeRecord::decode(wire);
  switch (record.outcome) {
    case ResumeRecord::Outcome::kConfigError:
    case ResumeRecord::Outcome::kIoError: {
      if (error) std::rethrow_exception(error);
      const std::string why = "--resume " + resume + ": rank 0 could not read the checkpoint (see its error)";
      if (record.outcome == ResumeRecord::Outcome::kConfigError) throw ConfigError(why);
      throw IoError(why);
    }
    case ResumeRecord::Outcome::kNothing:
      if (ctx.isMain()) {
        DTRAIN_LOG_INFO("--resume " << resume << ": no valid checkpoint in '" << options_.dir
                                    << "', starting from step 0");
      }
      return {};
    case ResumeRecord::Outcome::kFound: break;
  }
  TrainPosition position = record.position;
  if ((record.world_size != ctx.size() || record.batch_size != identity_.batch_size) && position.batch != 0) {
    if (ctx.isMain()) {
      DTRAIN_LOG_WARN("checkpoint at step " << position.step << " was written by " << record.world_size
                                            << " rank(s) x batch " << record.batch_size << "; this job has "
                                            << ctx.size() << " x " << identity_.batch_size
                                            << ", so it resumes at the start of epoch " << position.epoch + 2);
    }
    position = {position.epoch + 1, 0, position.step};
  }
  if (ctx.isMain()) {
    DTRAIN_LOG_INFO("resuming from " << found->first << " (step " << position.step << ", epoch "
                                     << position.epoch + 1 << ", batch " << position.batch << ")");
  }
  restore(ctx.isMain() ? &*found : nullptr);
  return position;
}

void JobCheckpoint::restore(const std::pair<std::string, CheckpointState>* found) {
  Context& ctx = job_.context();
  // Rank 0 loads into its own state; then everything is broadcast.
  TensorMap model = modelTensors(job_.dataParallel());
  TensorMap optimizer = job_.optimizer().stateDict();
  TensorMap scaler = job_.scaler().stateDict();
  if (found != nullptr) {
    const std::string& path = found->first;
    const TensorMap& saved = found->second.tensors;
    takeSaved(model, saved, "", path);
    takeSaved(optimizer, saved, "optimizer.", path);
    takeSaved(scaler, saved, "", path);
    restoreCpuGenerator(saved);
  }
  broadcastMap(model, ctx);
  broadcastMap(optimizer, ctx);
  broadcastMap(scaler, ctx);
  {
    // By parameter, in DataParallel's order (a tied weight has two names).
    DataParallel& dp = job_.dataParallel();
    std::unordered_map<const void*, torch::Tensor> by_impl;
    for (const auto& item : dp.module()->named_parameters(/*recurse=*/true)) {
      by_impl[item.value().unsafeGetTensorImpl()] = model.at("model.param." + item.key());
    }
    std::vector<torch::Tensor> values;
    for (const torch::Tensor& p : dp.parameters()) values.push_back(by_impl.at(p.unsafeGetTensorImpl()));
    dp.loadFullParameters(values);
    torch::NoGradGuard no_grad;
    for (const auto& item : dp.module()->named_buffers(/*recurse=*/true)) {
      item.value().copy_(model.at("model.buffer." + item.key()));
    }
  }
  job_.optimizer().loadStateDict(optimizer);
  job_.scaler().loadStateDict(scaler);
}

}  // namespace dtrain
