#include "train/trainer.h"
#include "train/train_memory.h"

#include <iostream>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <memory>
#include <optional>

#include "common/log.h"
#include "train/bucket_timer.h"
#include "train/fault_drill.h"
#include "gpu/gpu_peak.h"
#include "models/lm_config.h"
#include "train/image_classification.h"
#include "train/job_checkpoint.h"
#include "models/lm_counts.h"
#include "train/device_memory_stats.h"
#include "train/chat_modeling.h"
#include "train/language_modeling.h"
#include "plan/memory_estimate.h"
#include "train/progress_display.h"
#include "train/step_timeline.h"
#include "train/train_metrics.h"
#include "train/train_observer.h"
#include "train/training_job.h"
#include "train/stop_request.h"
#include "train/straggler_monitor.h"
#include "train/training_loop.h"

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;

// What watches this rank's run, and the parts the trainer talks to itself.
struct Watchers {
  ObserverList all;
  ProgressDisplay* progress = nullptr;  // rank 0
  StepTimeline* timeline = nullptr;     // --timeline
  StragglerMonitor* stragglers = nullptr;  // jobs of more than one rank
  std::unique_ptr<BucketTimer> buckets;  // when some watcher wants bucket timings
};

// Straggler detection, first among the watchers (it times the step between
// their calls) and in front of the step's and DataParallel's observers.
void addStragglerMonitor(const TrainOptions& o, TrainingJob& job, Watchers& w) {
  if (job.context().size() < 2) return;
  const int64_t warmup =
      StragglerMonitor::kWarmupSteps + (o.execution.cuda_graphs ? o.execution.graph_warmup + 1 : 0);
  auto monitor = std::make_unique<StragglerMonitor>(o.straggler, job.context(), w.all, warmup, faultSlowRankSetting());
  monitor->attach(job.step(), job.dataParallel());
  w.stragglers = monitor.get();
  w.all.addFirst(std::move(monitor));
}

// Bucket timings cost a few events per bucket; they are taken when asked
// for, and never from a captured graph (its all-reduces are graph nodes).
bool wantsBucketTimes(const TrainOptions& o) {
  return o.observe.print_bucket_timeline ||
         ((!o.observe.timeline.empty() || o.observe.metrics_port > 0) && !o.execution.cuda_graphs);
}

Watchers makeWatchers(const TrainOptions& o, TrainingJob& job, int64_t first_step) {
  Watchers w;
  Context& ctx = job.context();
  if (wantsBucketTimes(o)) {
    w.buckets = std::make_unique<BucketTimer>(job.dataParallel());
    job.dataParallel().setObserver(w.buckets.get());
  }
  if (ctx.isMain()) {
    auto progress = std::make_unique<ProgressDisplay>(o.observe.progress, o.observe.metrics_jsonl);
    w.progress = progress.get();
    w.all.add(std::move(progress));
  }
  auto metrics = std::make_unique<TrainMetrics>(ctx.rank(), ctx.size(), TrainMetrics::jobIdFromEnvironment(),
                                                ctx.device());
  metrics->setAllreduceBytesPerStep(job.allreduceBytesPerStep());
  if (o.observe.metrics_port > 0) {
    const int port = o.observe.metrics_port + ctx.localRank();
    metrics->serve(port);
    DTRAIN_LOG_INFO("metrics of rank " << ctx.rank() << " at http://0.0.0.0:" << port << "/metrics");
  }
  w.all.add(std::move(metrics));
  if (!o.observe.timeline.empty()) {
    // After warm-up and graph capture, so the window shows the steady state.
    auto timeline = std::make_unique<StepTimeline>(ctx.device(), ctx.rank(), first_step + o.execution.graph_warmup + 2,
                                                   o.observe.timeline_steps, w.buckets.get());
    w.timeline = timeline.get();
    job.step().setObserver(timeline.get());
    w.all.add(std::move(timeline));
  }
  if (auto drill = FaultDrill::fromEnvironment(ctx.rank())) w.all.add(std::move(drill));
  return w;
}

// The task the options describe: a language model's, or image classification.
std::unique_ptr<Task> makeTask(const TrainOptions& o) {
  if (isLanguageModel(o.model) && o.data.dataset == DatasetKind::kChat) {
    return std::make_unique<ChatTask>(o.data, o.model, o.seed);
  }
  if (isLanguageModel(o.model)) return std::make_unique<LanguageModelTask>(o.data, o.model, o.seed);
  return std::make_unique<ImageClassificationTask>(o.data, o.model, o.seed);
}

// The directory as one absolute name, whatever way the flag spelled it.
std::string absoluteDirectory(const std::string& dir) {
  std::string path = std::filesystem::weakly_canonical(std::filesystem::absolute(dir)).string();
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

CheckpointIdentity identityOf(const TrainOptions& o, const Task& task) {
  CheckpointIdentity id{o.model.name, datasetName(o.data.dataset), o.data.batch_size, o.seed, {}, {}, {}, {}};
  if (const auto* lm = dynamic_cast<const LanguageModelTask*>(&task)) {
    id.model_config = models::languageModelMetadata(lm->config());
    id.tokenizer = lm->tokenizer();
    id.tokenizer_path = lm->tokenizerPath();
    if (lm->lora().enabled()) {
      // The adapters and their base: --init-from, or "" for the fresh weights of --seed.
      id.lora = models::loraMetadata(lm->lora());
      id.lora["init_from"] = o.model.lm.init_from.empty() ? "" : absoluteDirectory(o.model.lm.init_from);
    }
  }
  return id;
}

// Language models: the micro-batches of one step on this many ranks.
void setAccumulation(const Task& task, TrainingJob& job) {
  if (const auto* lm = dynamic_cast<const LanguageModelTask*>(&task)) {
    job.step().setAccumulation(lm->accumulation(job.dataRanks()));
  }
}

LoopSettings loopSettings(const TrainOptions& o, TrainingJob& job) {
  LoopSettings s{o.schedule.epochs, o.schedule.max_steps, o.observe.log_every, o.observe.eval_every,
                 o.observe.eval_steps, o.checkpoint.every};
  s.flops_per_sample = job.model().trainingFlopsPerSample();
  s.peak_flops_per_device = gpu::peakDenseFlops(job.deviceName(), computePrecisionName(o.execution.precision));
  return s;
}

std::optional<MemoryInputs> memoryInputs(const TrainOptions& o, const Task& task, int ranks, bool cuda) {
  const auto* lm = dynamic_cast<const LanguageModelTask*>(&task);
  if (lm == nullptr) return std::nullopt;
  MemoryInputs in = lmMemoryInputs(o, lm->config(), ranks, cuda);
  if (lm->lora().enabled()) in.trainable = models::loraParameterCount(lm->config(), lm->lora());
  return in;
}

// --pp-print-schedule's last lines: each pipeline rank's memory on a GPU.
std::string pipelineMemoryText(const TrainOptions& o) {
  const models::LanguageModelConfig config = languageModelConfig(o.model);
  const int ranks = o.parallel.pp * o.parallel.tp * o.parallel.dp_replicate;
  const MemoryInputs in = lmMemoryInputs(o, config, ranks, /*cuda=*/true);
  std::string text;
  for (int rank = 0; rank < o.parallel.pp; ++rank) {
    const MemoryEstimate e = estimatePipelineRank(in, rank);
    text += "# memory of pipeline rank " + std::to_string(rank) + " (estimate, one GPU): " + gibText(e.total()) +
            " = parameters " + gibText(e.parameters) + ", gradients " + gibText(e.gradients) + ", optimizer " +
            gibText(e.optimizer) + ", activations " + gibText(e.activations) + "\n";
  }
  return text;
}

// What --shard splits, for the start line.
std::string shardNote(const ParallelPlan& plan) {
  const std::string over = " (sharded over " + std::to_string(plan.dp_shard) + " ranks, ZeRO-";
  switch (plan.shard) {
    case ShardStage::kOptimizer: return over + "1)";
    case ShardStage::kGradients: return over + "2)";
    case ShardStage::kFull: return over + "3)";
    case ShardStage::kNone: break;
  }
  return "";
}

// The mesh, for the start line when it has more than data parallelism.
std::string meshNote(const ParallelPlan& plan) {
  if (plan.tp == 1 && plan.dp_replicate == 1) return "";
  return " (dp_replicate " + std::to_string(plan.dp_replicate) + " x dp_shard " + std::to_string(plan.dp_shard) +
         " x tp " + std::to_string(plan.tp) + (plan.sequence_parallel ? ", sequence parallel" : "") + ")";
}

std::string startLine(const TrainOptions& o, const Task& task, TrainingJob& job, const BatchSource& batches,
                      const TrainPosition& position) {
  Context& ctx = job.context();
  const int64_t micro = job.step().accumulation();
  return "dtrain train: " + task.describe() + ", " + std::to_string(ctx.size()) + " rank(s)" + meshNote(job.plan()) + " x batch " +
         std::to_string(o.data.batch_size) + (micro > 1 ? " x " + std::to_string(micro) + " micro-batches" : "") +
         ", " + ctx.backend() + " on " + ctx.device().str() + ", " +
         precisionName(job.precision()) + ", " + describeOptimizer(o) + ", " + optimizerName(o.optimizer.kind) +
         " state " +
         std::to_string(job.optimizer().stateBytes()) + " bytes per rank" + shardNote(job.plan()) +
         ", gradients " + std::to_string(job.dataParallel().gradientBytes()) + " bytes per rank" +
         ", parameters " + std::to_string(job.dataParallel().parameterBytes()) + " bytes per rank" +
         (position.step > 0 ? ", resumed at step " + std::to_string(position.step) : std::string()) +
         batches.describe();
}

// After the last step: the bucket table, the trace, the graphs' record.
void reportEnd(const TrainOptions& o, TrainingJob& job, Watchers& w) {
  if (o.observe.print_bucket_timeline && w.progress != nullptr && w.buckets && w.buckets->backwards() > 0) {
    w.progress->bucketTable(w.buckets->last());
  }
  if (w.timeline != nullptr) {
    const std::string note = w.timeline->write(o.observe.timeline, job.context());
    if (!note.empty()) w.all.message(note);
  }
  if (o.execution.cuda_graphs) {
    const TrainStep& step = job.step();
    w.all.message("CUDA graphs: " + step.graphStatus() + "; " + std::to_string(step.graphedSteps()) +
                  " steps replayed, " + std::to_string(step.eagerSteps()) + " eager");
  }
}

std::string stopSignalName(int sig) {
  switch (sig) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "signal " + std::to_string(sig);
  }
}

// Every rank after the agreed step: the checkpoint of where the run is,
// then an exit that asks to be run again (or, without --checkpoint-dir,
// the signal's own exit status: nothing was kept).
int stopAfterSignal(const TrainOptions& o, TrainingJob& job, TrainingLoop& loop, const StopAgreement& stop,
                    Watchers& watchers) {
  const int64_t steps = loop.stopAt();
  const int sig = stop.signal();
  const std::string by = stopSignalName(stop.signal());
  if (o.checkpoint.dir.empty()) {
    watchers.all.message("dtrain train: stopped by " + by + " after step " + std::to_string(steps) + " of " +
                         std::to_string(loop.totalSteps()) + "; no --checkpoint-dir, so nothing was saved; exit " +
                         std::to_string(128 + sig));
    job.dataParallel().setObserver(nullptr);
    job.context().barrier();
    return 128 + sig;
  }
  watchers.all.message("dtrain train: stopped by " + by + " after step " + std::to_string(steps) + " of " +
                       std::to_string(loop.totalSteps()) + "; checkpoint of step " + std::to_string(steps) +
                       " written to " + o.checkpoint.dir + " (--resume auto goes on from it); exit " +
                       std::to_string(kExitStoppedAfterCheckpoint));
  job.dataParallel().setObserver(nullptr);
  job.context().barrier();
  return kExitStoppedAfterCheckpoint;
}

// Every rank after the window that flagged a straggler (--on-straggler
// stop): the checkpoint of where the run is, the reason where `dtrain
// launch` reads it, and the exit that asks to be placed again.
int stopAfterStraggler(const TrainOptions& o, TrainingJob& job, TrainingLoop& loop, Watchers& watchers) {
  const int64_t steps = loop.stopAt();
  const std::string& reason = watchers.stragglers->stopReason();
  watchers.all.message("dtrain train: stopped after step " + std::to_string(steps) + " of " +
                       std::to_string(loop.totalSteps()) + " (--on-straggler stop): " + reason + "; checkpoint of step " +
                       std::to_string(steps) + " written to " + o.checkpoint.dir +
                       " (--resume auto goes on from it); exit " + std::to_string(kExitStoppedAfterCheckpoint));
  writeStopReasonFile(reason);
  watchers.stragglers->detach();
  job.dataParallel().setObserver(nullptr);
  job.context().barrier();
  return kExitStoppedAfterCheckpoint;
}

}  // namespace

int runTraining(const TrainOptions& given) {
  // The optimizer and schedule the flags left to the model's kind.
  const TrainOptions o = withModelDefaults(given);
  if (o.parallel.pp_print_schedule) {
    std::cout << describePipeline(o.parallel, plannedModel(o.model)) << pipelineMemoryText(o) << std::flush;
    return 0;
  }
  checkTrainOptions(o);
  const auto wall_start = Clock::now();
  // From here a stop signal ends the process at once (nothing to save yet),
  // and once the loop starts it is honoured after the step in flight.
  StopSignals stop_signals;
  // Data errors name the data set and files before any rank waits on another.
  std::unique_ptr<Task> made = makeTask(o);
  Task& task = *made;
  JobParts parts{o.parallel, o.execution, o.optimizer, o.model.channels_last, o.seed, {}, plannedModel(o.model)};
  parts.preflight = [&o, &task](Context& ctx, const std::string& device_name) {
    const int64_t limit = plannedDeviceBytes(ctx.device());
    if (limit <= 0) return;
    if (auto in = memoryInputs(o, task, ctx.size(), ctx.device().is_cuda())) {
      checkFits(*in, limit, plannedMemoryName(ctx.device(), device_name));
    }
  };
  // --init-from under ZeRO-3 or tensor parallelism: each rank reads its share, once parallelized.
  auto* pretrained = dynamic_cast<LanguageModelTask*>(&task);
  const bool init_from_shared = pretrained != nullptr && !o.model.lm.init_from.empty() && !pretrained->lora().enabled() &&
                                o.parallel.pp == 1 && (o.parallel.shard == ShardStage::kFull || o.parallel.tp > 1);
  if (init_from_shared) pretrained->loadInitFromLater();
  TrainingJob job(parts, [&task] { return task.makeModel(); });
  Context& ctx = job.context();
  setAccumulation(task, job);
  std::unique_ptr<BatchSource> batches = task.trainBatches(job.dataRank(), job.dataRanks(), ctx.device());
  JobCheckpoint checkpoint(job, o.checkpoint, identityOf(o, task));
  if (init_from_shared) {
    const CheckpointLayout& layout = checkpoint.layout();
    pretrained->loadInitFrom(
        layout.parameterShapes(), [&layout](const CheckpointLayout::ParameterReader& read) { layout.loadParameters(read); },
        ctx.rank());
  }
  const TrainPosition start = checkpoint.resume();

  Watchers watchers = makeWatchers(o, job, start.step);
  addStragglerMonitor(o, job, watchers);
  watchers.all.message(startLine(o, task, job, *batches, start));
  if (auto in = memoryInputs(o, task, ctx.size(), ctx.device().is_cuda())) {
    watchers.all.message(describeEstimate(*in, estimateMemory(*in)));
  }
  const std::string graphs = job.step().graphStatus();
  if (o.execution.cuda_graphs && !graphs.empty() && graphs != "warming up") {
    watchers.all.message("CUDA graphs off: " + graphs);
  }
  const int64_t steps_per_epoch = batches->batchesPerEpoch();
  const LoopSettings settings = loopSettings(o, job);
  TrainingLoop loop(job, task, *batches, checkpoint, watchers.all, watchers.buckets.get(), settings,
                    scheduleFor(o.schedule, o.optimizer.lr, steps_per_epoch));
  StopAgreement stop(ctx.rank(), ctx.size(), [&ctx](std::vector<double>& v) { ctx.allreduceSum(v); },
                     [] { return StopSignals::received(); });
  loop.setStop(&stop);
  StragglerMonitor* stragglers = watchers.stragglers;
  loop.setStopWhen([stragglers] { return stragglers != nullptr && stragglers->stopRequested(); });
  if (watchers.progress != nullptr) watchers.progress->planned(loop.totalSteps(), o.schedule.epochs, start.step);
  StopSignals::deferFromNowOn();
  loop.run(start, wall_start);
  if (loop.stopped() && stop.signal() == 0 && stragglers != nullptr && stragglers->stopRequested()) {
    return stopAfterStraggler(o, job, loop, watchers);
  }
  if (loop.stopped()) return stopAfterSignal(o, job, loop, stop, watchers);
  reportEnd(o, job, watchers);
  watchers.all.finished(loop.finish());
  job.dataParallel().setObserver(nullptr);
  ctx.barrier();
  return 0;
}

}  // namespace dtrain

extern "C" int dtrain_run_training(const dtrain::TrainOptions* options) { return dtrain::runTraining(*options); }
