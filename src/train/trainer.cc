#include "train/trainer.h"

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <thread>

#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"
#include "common/settings.h"
#include "data/device_data.h"
#include "data/loader.h"
#include "dtrain/amp.h"
#include "dtrain/checkpoint.h"
#include "dtrain/data_parallel.h"
#include "dtrain/init.h"
#include "dtrain/lr_schedule.h"
#include "dtrain/optim.h"
#include "models/model.h"
#include "train/progress.h"
#include "train/train_data.h"
#include "train/train_settings.h"
#include "train/train_metrics.h"
#include "train/train_state.h"
#include "train/train_step.h"

namespace dtrain {
namespace {

void validate(const TrainConfig& c) {
  auto positive = [](int64_t v, const char* flag) {
    if (v <= 0) throw ConfigError(std::string(flag) + " must be > 0, got " + std::to_string(v));
  };
  positive(c.epochs, "--epochs");
  positive(c.batch_size, "--batch-size");
  positive(c.log_every, "--log-every");
  positive(c.graph_warmup, "--graph-warmup");
  positive(c.timeline_steps, "--timeline-steps");
  if (c.lr < 0) throw ConfigError("--lr must be >= 0, got " + std::to_string(c.lr));
  if (c.bucket_mb <= 0) throw ConfigError("--bucket-mb must be > 0, got " + std::to_string(c.bucket_mb));
  if (c.checkpoint_every < 0) throw ConfigError("--checkpoint-every must be >= 0");
  if (c.eval_every < 0) throw ConfigError("--eval-every must be >= 0");
  if (c.warmup_epochs < 0) throw ConfigError("--warmup must be >= 0 epochs");
  if (c.optimizer != "sgd" && c.optimizer != "adamw") {
    throw ConfigError("--optimizer '" + c.optimizer + "' is unknown; expected sgd or adamw");
  }
  if (!c.resume.empty() && c.resume != "none" && c.resume == "auto" && c.checkpoint_dir.empty()) {
    throw ConfigError("--resume auto needs --checkpoint-dir (where to look for checkpoints)");
  }
}

// The rank that the fault drill kills, and after which step (-1: none).
std::pair<int, int64_t> faultDrill() {
  const std::string spec = faultKillAtSetting();
  if (spec.empty()) return {-1, -1};
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (restarts != nullptr && std::string(restarts) != "0") return {-1, -1};
  const auto colon = spec.find(':');
  if (colon == std::string::npos) throw ConfigError("DTRAIN_FAULT_KILL_AT='" + spec + "' is not RANK:STEP");
  return {static_cast<int>(parseInt64(spec.substr(0, colon), "DTRAIN_FAULT_KILL_AT rank")),
          parseInt64(spec.substr(colon + 1), "DTRAIN_FAULT_KILL_AT step")};
}

struct EvalResult {
  int64_t correct = 0;
  int64_t total = 0;
  double loss = 0;
};

EvalResult evaluate(models::Model& model, data::DataLoader& loader, Context& ctx, Precision precision) {
  torch::NoGradGuard no_grad;
  model.eval();
  loader.startEpoch(0);
  torch::Tensor correct = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(ctx.device()));
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(ctx.device()));
  int64_t total = 0;
  while (auto batch = loader.next()) {
    torch::Tensor logits;
    {
      AutocastGuard autocast(ctx.device(), precision);
      logits = model.forward(batch->images);
    }
    logits = logits.to(torch::kFloat);
    correct += logits.argmax(1).eq(batch->labels).sum();
    loss_sum += torch::nn::functional::cross_entropy(
                    logits, batch->labels,
                    torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .to(torch::kDouble);
    total += batch->labels.size(0);
  }
  model.train();
  std::vector<double> sums{static_cast<double>(correct.item<int64_t>()), static_cast<double>(total),
                           loss_sum.item<double>()};
  ctx.allreduceSum(sums);
  EvalResult result;
  result.correct = static_cast<int64_t>(std::llround(sums[0]));
  result.total = static_cast<int64_t>(std::llround(sums[1]));
  result.loss = result.total > 0 ? sums[2] / static_cast<double>(result.total) : 0;
  return result;
}

}  // namespace

int runTraining(const TrainConfig& config) {
  validate(config);
  const auto wall_start = std::chrono::steady_clock::now();
  const Precision precision = parsePrecision(config.precision);

  // Share the cores among the ranks of this node (torchrun's OMP_NUM_THREADS
  // advice), unless the user chose a thread count.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    const char* local_world = std::getenv("LOCAL_WORLD_SIZE");
    const int64_t ranks_here = local_world != nullptr ? std::max<int64_t>(1, std::atoll(local_world)) : 1;
    const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
    torch::set_num_threads(static_cast<int>(std::max<int64_t>(1, cores / ranks_here)));
  }

  // TF32 as PyTorch's defaults: cuDNN convolutions may use TF32, float32
  // matmuls do not (torch.backends.cuda.matmul.allow_tf32 = False).
  at::globalContext().setAllowTF32CuDNN(true);
  at::globalContext().setBenchmarkCuDNN(config.cudnn_benchmark && !config.deterministic);
  at::globalContext().setDeterministicCuDNN(config.deterministic);

  TrainData data = loadTrainData(config);  // errors name the data set and files before any rank waits on another

  InitOptions init_options;
  init_options.backend = config.backend;
  init_options.collective_timeout = std::chrono::seconds(config.timeout_s);
  std::shared_ptr<Context> ctx = init(init_options);
  const JobStreamGuard job_stream(ctx->device());  // a capturable stream for everything on the device
  const bool main_rank = ctx->isMain();

  torch::manual_seed(config.seed);
  models::ModelOptions model_options;
  model_options.in_channels = data.channels;
  model_options.num_classes = data.classes;
  model_options.image_size = data.image_size;
  std::shared_ptr<models::Model> model = models::createModel(config.model, model_options);
  if (config.channels_last) useChannelsLast(*model);
  model->to(ctx->device());

  DataParallelOptions dp_options;
  dp_options.bucket_mb = config.bucket_mb;
  dp_options.timeout = std::chrono::seconds(config.timeout_s);
  // Bucket timings need timing events; a captured graph gets none (its
  // all-reduces then show as part of the replayed step).
  dp_options.record_timeline = config.print_bucket_timeline ||
                               ((!config.timeline.empty() || config.metrics_port > 0) && !config.cuda_graphs);
  DataParallel dp(model, ctx->communicator(), dp_options);

  std::unique_ptr<Optimizer> optimizer;
  if (config.optimizer == "sgd") {
    SGDOptions o;
    o.lr = config.lr;
    o.momentum = config.momentum;
    o.weight_decay = config.weight_decay;
    o.nesterov = config.nesterov;
    optimizer = makeSGD(dp.slabs(), o);
  } else {
    AdamWOptions o;
    o.lr = config.lr;
    o.weight_decay = config.weight_decay;
    optimizer = makeAdamW(dp.slabs(), o);
  }
  GradScalerOptions scaler_options;
  scaler_options.enabled = precision == Precision::kFp16;
  GradScaler scaler(scaler_options);

  // Training batches come from the prefetching loader, or (--data-on-gpu)
  // from the data set kept whole on the device.
  const data::LoaderOptions train_options = trainLoaderOptions(config, data, ctx->rank(), ctx->size(), ctx->device());
  std::optional<data::DataLoader> train_loader;
  std::optional<data::DeviceEpochData> train_on_device;
  if (config.data_on_gpu) {
    train_on_device.emplace(data.train, train_options);
  } else {
    train_loader.emplace(data.train, train_options);
  }
  data::DataLoader test_loader(data.test, testLoaderOptions(config, data, ctx->rank(), ctx->size(), ctx->device()));
  const int64_t steps_per_epoch =
      train_on_device ? train_on_device->batchesPerEpoch() : train_loader->batchesPerEpoch();
  int64_t total_steps = steps_per_epoch * config.epochs;
  if (config.max_steps > 0) total_steps = std::min(total_steps, config.max_steps);

  LrScheduleOptions schedule;
  schedule.kind = config.schedule;
  schedule.base_lr = config.lr;
  schedule.warmup_steps = static_cast<int64_t>(std::llround(config.warmup_epochs * steps_per_epoch));
  schedule.total_steps = steps_per_epoch * config.epochs;
  schedule.step_size = std::max<int64_t>(
      1, static_cast<int64_t>(std::llround((config.step_epochs > 0 ? config.step_epochs
                                                                   : std::max(1.0, config.epochs / 3.0)) *
                                           steps_per_epoch)));
  schedule.gamma = config.gamma;
  validate(schedule);

  TrainStepOptions step_options;
  step_options.cuda_graphs = config.cuda_graphs;
  step_options.warmup_steps = config.graph_warmup;
  step_options.precision = precision;
  step_options.clip_grad_norm = config.clip_grad_norm;
  step_options.communicator_capturable = ctx->backend() == "nccl";
  TrainStep train_step([&model](const torch::Tensor& x) { return model->forward(x); }, dp, *optimizer, scaler,
                       ctx->device(), step_options);

  TrainState state{dp, *optimizer, scaler, *ctx};
  std::unique_ptr<StepTimeline> timeline;
  TrainMetrics metrics(ctx->rank(), ctx->size(), TrainMetrics::jobIdFromEnvironment(), ctx->device());
  if (config.metrics_port > 0) {
    const char* local_rank = std::getenv("LOCAL_RANK");
    const int port = config.metrics_port + (local_rank != nullptr ? std::atoi(local_rank) : 0);
    metrics.serve(port);
    DTRAIN_LOG_INFO("metrics of rank " << ctx->rank() << " at http://0.0.0.0:" << port << "/metrics");
  }
  int64_t allreduce_bytes_per_step = 0;
  for (const FlatSlab& slab : dp.slabs()) allreduce_bytes_per_step += slab.grad.numel() * slab.grad.element_size();
  int64_t steps_since_log = 0;
  TrainPosition position;  // epoch 0, batch 0, step 0
  std::unique_ptr<Checkpointer> checkpointer;
  if (!config.checkpoint_dir.empty()) {
    CheckpointerOptions o;
    o.dir = config.checkpoint_dir;
    o.keep = config.keep_checkpoints;
    if (main_rank) checkpointer = std::make_unique<Checkpointer>(o);
  }
  if (!config.resume.empty() && config.resume != "none") {
    position = resumeFrom(config, state, steps_per_epoch);
  }

  std::unique_ptr<ProgressReporter> progress;
  if (main_rank) {
    progress = std::make_unique<ProgressReporter>(config.progress, config.metrics_jsonl);
    progress->message("dtrain train: " + config.model + " on " + config.dataset + " (" +
                      std::to_string(data.train.size()) + " train / " + std::to_string(data.test.size()) +
                      " test), " + std::to_string(ctx->size()) + " rank(s) x batch " +
                      std::to_string(config.batch_size) + ", " + ctx->backend() + " on " + ctx->device().str() +
                      ", " + precisionName(precision) +
                      (position.step > 0 ? ", resumed at step " + std::to_string(position.step) : std::string()) +
                      (config.data_on_gpu ? ", data on the device" : ""));
    if (config.cuda_graphs && !train_step.graphStatus().empty() && train_step.graphStatus() != "warming up") {
      progress->message("CUDA graphs off: " + train_step.graphStatus());
    }
  }
  const auto [fault_rank, fault_step] = faultDrill();
  if (!config.timeline.empty()) {
    // After warm-up and graph capture, so the window shows the steady state.
    timeline = std::make_unique<StepTimeline>(ctx->device(), ctx->rank(), position.step + config.graph_warmup + 2,
                                              config.timeline_steps);
    train_step.setTimeline(timeline.get());
  }

  auto save = [&](const TrainPosition& at) {
    if (config.checkpoint_dir.empty()) return;
    dp.syncBuffers();
    if (checkpointer) {
      const std::string path = checkpointer->save(at.step, packState(state, at, config));
      DTRAIN_LOG_DEBUG("checkpoint " << path);
    }
  };

  EvalResult last_eval;
  int64_t step = position.step;
  auto report_start = std::chrono::steady_clock::now();
  int64_t report_samples = 0;
  int64_t samples_trained = 0;  // approximate: the last batch of an epoch may be smaller on some ranks
  int64_t loss_count = 0;
  bool done = step >= total_steps;
  bool evaluated_last = false;

  for (int64_t epoch = position.epoch; epoch < config.epochs && !done; ++epoch) {
    const int64_t first_batch = epoch == position.epoch ? position.batch : 0;
    int64_t next_on_device = first_batch;
    if (train_on_device) {
      train_on_device->startEpoch(epoch);
    } else {
      train_loader->startEpoch(epoch, first_batch);
    }
    auto next_batch = [&]() -> std::optional<data::Batch> {
      if (!train_on_device) return train_loader->next();
      if (next_on_device >= train_on_device->batchesPerEpoch()) return std::nullopt;
      return train_on_device->batch(next_on_device++);
    };
    model->train();
    while (true) {
      const auto wait_begin = std::chrono::steady_clock::now();
      std::optional<data::Batch> batch = next_batch();
      if (!batch) break;
      const auto wait_end = std::chrono::steady_clock::now();
      metrics.dataWait(std::chrono::duration<double>(wait_end - wait_begin).count());
      metrics.stepStarted(batch->labels.size(0));
      if (timeline) {
        timeline->dataWait(step, wait_begin, wait_end);
        timeline->beginStep(step);
      }
      const double lr = learningRateAt(schedule, step);
      optimizer->setLr(lr);
      train_step.run(batch->images, batch->labels);
      if (timeline) timeline->endStep(dp, !train_step.lastStepGraphed());
      ++step;
      ++loss_count;
      report_samples += batch->labels.size(0) * ctx->size();
      samples_trained += batch->labels.size(0) * ctx->size();
      evaluated_last = false;

      if (ctx->rank() == fault_rank && step == fault_step) {
        DTRAIN_LOG_WARN("DTRAIN_FAULT_KILL_AT: rank " << fault_rank << " kills itself after step " << step);
        ::kill(::getpid(), SIGKILL);
      }
      const TrainPosition next = nextPosition(epoch, batch->index + 1, step, steps_per_epoch);
      if (config.checkpoint_every > 0 && step % config.checkpoint_every == 0) save(next);
      ++steps_since_log;
      if (step % config.log_every == 0 || step == total_steps) {
        // Every rank: its metrics; rank 0 also the progress line.
        const auto now = std::chrono::steady_clock::now();
        const double seconds = std::chrono::duration<double>(now - report_start).count();
        StepReport r;
        r.step = step;
        r.total_steps = total_steps;
        r.epoch = epoch;
        r.epochs = config.epochs;
        r.loss = train_step.lossSum().item<double>() / static_cast<double>(std::max<int64_t>(1, loss_count));
        r.lr = lr;
        r.samples_per_s = seconds > 0 ? static_cast<double>(report_samples) / seconds : 0;
        r.elapsed_s = std::chrono::duration<double>(now - wall_start).count();
        if (progress) progress->step(r);
        const bool sampled = dp_options.record_timeline && !train_step.lastStepGraphed();
        const BackwardTimeline backward = sampled ? dp.lastTimeline() : BackwardTimeline{};
        metrics.logInterval(r.samples_per_s, r.loss, sampled ? &backward : nullptr, allreduce_bytes_per_step,
                            steps_since_log);
        steps_since_log = 0;
        train_step.zeroLossSum();
        loss_count = 0;
        report_samples = 0;
        report_start = now;
      }
      if (step >= total_steps) {
        done = true;
        break;
      }
    }
    const bool last_epoch = done || epoch + 1 == config.epochs;
    if (!done && config.checkpoint_every == 0) save(nextPosition(epoch + 1, 0, step, steps_per_epoch));
    if ((config.eval_every > 0 && (epoch + 1) % config.eval_every == 0) || last_epoch) {
      dp.syncBuffers();
      last_eval = evaluate(*model, test_loader, *ctx, precision);
      evaluated_last = true;
      if (progress) {
        EvalReport e{epoch, step, last_eval.total ? double(last_eval.correct) / double(last_eval.total) : 0,
                     last_eval.correct, last_eval.total, last_eval.loss};
        progress->eval(e);
      }
    }
  }
  if (config.print_bucket_timeline && progress && dp.syncedBackwards() > 0) progress->timeline(dp.lastTimeline());
  if (timeline) {
    timeline->writePart(config.timeline);
    ctx->barrier();
    if (main_rank) {
      const std::string note = StepTimeline::merge(config.timeline, ctx->size());
      if (progress) progress->message(note.empty() ? "timeline: " + config.timeline : note);
    }
  }
  if (config.cuda_graphs && progress) {
    progress->message("CUDA graphs: " + train_step.graphStatus() + "; " + std::to_string(train_step.graphedSteps()) +
                      " steps replayed, " + std::to_string(train_step.eagerSteps()) + " eager");
  }
  if (!evaluated_last) {
    dp.syncBuffers();
    last_eval = evaluate(*model, test_loader, *ctx, precision);
  }
  save(TrainPosition{config.epochs, 0, step});
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  if (progress) {
    EvalReport e{config.epochs - 1, step, last_eval.total ? double(last_eval.correct) / double(last_eval.total) : 0,
                 last_eval.correct, last_eval.total, last_eval.loss};
    progress->summary(e, step, samples_trained, wall, ctx->size());
  }
  ctx->barrier();
  return 0;
}

}  // namespace dtrain

extern "C" int dtrain_run_training(const dtrain::TrainConfig* config) { return dtrain::runTraining(*config); }
