#include "train/job_checkpoint.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <vector>

#include "checkpoint/checkpoint_file_writer.h"
#include "checkpoint/checkpoint_sharded.h"
#include "common/env.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "common/settings.h"
#include "train/job_checkpoint_steps.h"
#include "train/train_settings.h"

namespace dtrain {
namespace {

using namespace checkpoint_steps;  // NOLINT: this file's half of JobCheckpoint

// DTRAIN_FAULT_KILL_IN_CHECKPOINT=RANK:STEP: this rank SIGKILLs itself
// halfway through its shard of step STEP (first attempt only), for drills.
void armCheckpointKill(std::vector<TensorToWrite>& tensors, int rank, int64_t step) {
  const std::string spec = faultKillInCheckpointSetting();
  if (spec.empty() || tensors.empty()) return;
  const auto colon = spec.find(':');
  if (colon == std::string::npos) throw ConfigError("DTRAIN_FAULT_KILL_IN_CHECKPOINT='" + spec + "' is not RANK:STEP");
  if (parseInt64(spec.substr(0, colon), "DTRAIN_FAULT_KILL_IN_CHECKPOINT rank") != rank ||
      parseInt64(spec.substr(colon + 1), "DTRAIN_FAULT_KILL_IN_CHECKPOINT step") != step ||
      envInt("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30).value_or(0) != 0) {
    return;
  }
  TensorToWrite& middle = tensors[tensors.size() / 2];
  middle.fetch = [rank, step, fetch = middle.fetch]() -> torch::Tensor {
    DTRAIN_LOG_WARN("DTRAIN_FAULT_KILL_IN_CHECKPOINT: rank " << rank << " kills itself while writing its shard of "
                                                             << "step " << step);
    ::kill(::getpid(), SIGKILL);
    return fetch();
  };
}

}  // namespace

TrainPosition nextPosition(int64_t epoch, int64_t batch, int64_t step, int64_t steps_per_epoch) {
  if (batch >= steps_per_epoch) return {epoch + 1, 0, step};
  return {epoch, batch, step};
}

JobCheckpoint::JobCheckpoint(TrainingJob& job, const CheckpointOptions& options, CheckpointIdentity identity)
    : job_(job), options_(options), identity_(std::move(identity)) {
  if (enabled() && job_.context().isMain()) {
    if (const int err = makeDirectories(options_.dir)) {
      throw errnoError("mkdir", err, "cannot create checkpoint directory '" + options_.dir + "'");
    }
  }
}

CheckpointLayout& JobCheckpoint::layout() {
  if (!layout_) {
    Context& ctx = job_.context();
    MeshPlacement tp;
    if (const TensorParallelModel* split = job_.tensorParallel()) {
      tp.tp = split->group().size();
      tp.splits = &split->parameterLayout();
    }
    if (job_.plan().dp_replicate > 1 && job_.plan().shard != ShardStage::kNone) tp.replicas = job_.plan().dp_replicate;
    // A pipeline stage's ranks (pp outermost: consecutive) lay out its tensors as a world of their own.
    const int stage_world = ctx.size() / job_.plan().pp;
    // A LoRA run's frozen base is its --init-from (or --seed): loaded again, never saved.
    layout_ = std::make_unique<CheckpointLayout>(job_.dataParallel(), job_.optimizer(), job_.scaler(),
                                                 job_.plan().shard, ctx.rank() % stage_world, stage_world, tp,
                                                 /*frozen=*/identity_.lora.empty());
  }
  return *layout_;
}

nlohmann::json JobCheckpoint::meta(const TrainPosition& position) const {
  nlohmann::json meta = {{"step", position.step},
                         {"epoch", position.epoch},
                         {"batch", position.batch},
                         {"world_size", job_.context().size()},
                         {"data_ranks", job_.dataRanks()},
                         {"tp", job_.plan().tp},
                         {"pp", job_.plan().pp},
                         {"batch_size", identity_.batch_size},
                         {"model", identity_.model},
                         {"dataset", identity_.dataset},
                         {"optimizer", job_.optimizer().name()},
                         {"seed", identity_.seed},
                         {"tensor_layout", kParameterLayout}};
  if (!identity_.model_config.empty()) meta["model_config"] = identity_.model_config;
  if (!identity_.lora.empty()) meta["lora"] = identity_.lora;
  if (!identity_.tokenizer.empty()) {
    meta["tokenizer"] = {{"kind", identity_.tokenizer}, {"path", identity_.tokenizer_path}};
  }
  return meta;
}

// Rank 0 makes the directory and, when it holds an older write of this
// step, removes its metadata first (so it is incomplete until the new one
// is) and the shards of other world sizes; every rank learns how it went.
void JobCheckpoint::prepareDirectory(const std::string& path) {
  Context& ctx = job_.context();
  std::exception_ptr error;
  if (ctx.isMain()) {
    try {
      if (const int err = makeDirectories(path)) {
        throw errnoError("mkdir", err, "cannot create checkpoint directory '" + path + "'");
      }
      const std::string metadata = path + "/" + kShardedMetadataFile;
      if (::unlink(metadata.c_str()) != 0 && errno != ENOENT) throw errnoError("unlink", errno, metadata);
      removeStaleShards(path, ctx.size());
    } catch (...) {
      error = std::current_exception();
    }
  }
  throwIfAnyFailed(exchange(ctx, {static_cast<double>(outcomeOf(error))}), error, "preparing checkpoint " + path);
}

// Every rank writes its shard; returns each rank's {outcome, bytes, crc}.
std::vector<std::vector<double>> JobCheckpoint::writeShard(const std::string& path, int64_t step) {
  Context& ctx = job_.context();
  std::exception_ptr error;
  WrittenFile written;
  try {
    std::vector<TensorToWrite> tensors = layout().tensorsToWrite();
    armCheckpointKill(tensors, ctx.rank(), step);
    const nlohmann::json meta = {{"shard", {{"rank", ctx.rank()}, {"world_size", ctx.size()}, {"step", step}}}};
    written = writeCheckpointFile(path + "/" + shardFileName(ctx.rank(), ctx.size()), meta, tensors);
  } catch (...) {
    error = std::current_exception();
  }
  const auto all = exchange(ctx, {static_cast<double>(outcomeOf(error)), static_cast<double>(written.bytes),
                                  static_cast<double>(written.crc)});
  throwIfAnyFailed(all, error, "writing checkpoint " + path);
  return all;
}

std::vector<ShardedMetadata> JobCheckpoint::stageLayouts() {
  Context& ctx = job_.context();
  const int stage_world = ctx.size() / job_.plan().pp;
  const int local = ctx.rank() % stage_world;
  ShardedMetadata mine;
  if (local == 0) {
    mine.world_size = stage_world;
    mine.stage = shardStageName(layout().stage());
    mine.tensors = layout().logicalTensors();
    mine.aliases = layout().aliases();
    for (int r = 0; r < stage_world; ++r) mine.shards.push_back({shardFileName(r, stage_world), 0, 0, layout().rangesOf(r)});
  }
  if (job_.plan().pp == 1) return {mine};
  std::vector<ShardedMetadata> out;
  const std::vector<std::string> texts = exchangeText(ctx, local == 0 ? metadataJson(mine).dump() : std::string());
  for (int stage = 0; stage < job_.plan().pp; ++stage) {
    out.push_back(parseShardedMetadata("pipeline stage " + std::to_string(stage) + "'s checkpoint layout",
                                       nlohmann::json::parse(texts.at(static_cast<size_t>(stage * stage_world)))));
  }
  return out;
}

void JobCheckpoint::writeMetadata(const std::string& path, const TrainPosition& position,
                                  const std::vector<std::vector<double>>& written,
                                  const std::vector<ShardedMetadata>& stages) {
  Context& ctx = job_.context();
  ShardedMetadata md;
  md.meta = meta(position);
  md.world_size = ctx.size();
  md.stage = shardStageName(layout().stage());
  // The stages' tensors, each once: the first stage that lays one out writes it.
  std::map<std::string, size_t> owner;
  for (size_t s = 0; s < stages.size(); ++s) {
    for (const LogicalTensor& t : stages[s].tensors) {
      if (owner.emplace(t.name, s).second) md.tensors.push_back(t);
    }
    md.aliases.insert(stages[s].aliases.begin(), stages[s].aliases.end());
  }
  std::sort(md.tensors.begin(), md.tensors.end(),
            [](const LogicalTensor& a, const LogicalTensor& b) { return a.name < b.name; });
  const int stage_world = ctx.size() / static_cast<int>(stages.size());
  for (int r = 0; r < ctx.size(); ++r) {
    const size_t stage = static_cast<size_t>(r / stage_world);
    std::vector<ShardRange> ranges;
    for (const ShardRange& range : stages[stage].shards.at(static_cast<size_t>(r % stage_world)).ranges) {
      if (owner.at(range.tensor) == stage) ranges.push_back(range);
    }
    md.shards.push_back({shardFileName(r, ctx.size()), static_cast<uint64_t>(asInt(written[r][1])),
                         static_cast<uint32_t>(asInt(written[r][2])), std::move(ranges)});
  }
  writeShardedMetadata(path, md);
  invalid_paths_.erase(path);  // written again: valid now
  pruneCheckpoints(options_.dir, kPrefix, options_.keep, path, invalid_paths_);
}

void JobCheckpoint::save(const TrainPosition& position) {
  if (!enabled() || position.step == saved_step_) return;
  const std::string path = options_.dir + "/" + checkpointStem(kPrefix, position.step);
  if (path == resumed_path_ && position.step == resumed_step_) return;  // that checkpoint is this state
  const auto start = Clock::now();
  job_.dataParallel().syncBuffers();
  prepareDirectory(path);
  const auto written = writeShard(path, position.step);
  const std::vector<ShardedMetadata> stages = stageLayouts();
  if (job_.context().isMain()) {
    writeMetadata(path, position, written, stages);
    double bytes = 0;
    for (const auto& w : written) bytes += w[1];
    const double took = secondsSince(start);
    DTRAIN_LOG_INFO("checkpoint step " << position.step << ": " << gib(bytes) << " in " << seconds(took) << " ("
                                       << gib(took > 0 ? bytes / took : 0) << "/s, " << written.size()
                                       << " shard(s)) -> " << path);
  }
  saved_step_ = position.step;
}

}  // namespace dtrain
