#include "train/train_options.h"

#include <sys/stat.h>

#include "common/error.h"
#include "common/options.h"
#include "models/catalog.h"

namespace dtrain {
namespace {

constexpr int64_t kMaxBatch = int64_t{1} << 20;
constexpr int64_t kMaxEpochs = 1'000'000;
constexpr int64_t kMaxSteps = int64_t{1} << 40;
constexpr int64_t kMaxTimeoutSeconds = 7 * 24 * 3600;

void declareModel(OptionSet& set, ModelSpec& o, bool with_stem) {
  set.choice("--model", o.name, models::modelNames(), "The network to train");
  if (with_stem) {
    set.choice("--stem", o.stem, {"auto", "cifar", "imagenet"},
               "ResNet stem: imagenet (as torchvision) | cifar (3x3, no max-pool) | auto (cifar up to 64 pixels)");
  }
  set.toggle("--channels-last", o.channels_last, "Images and conv weights in channels-last memory format");
}

void declareExecution(OptionSet& set, ExecutionOptions& o, bool bench) {
  if (bench) {
    set.choice("--precision", o.precision, {"fp32", "bf16"}, "fp32 | bf16 (autocast)");
    set.negatedToggle("--no-cuda-graphs", o.cuda_graphs, "Run every step eagerly instead of replaying a CUDA graph");
  } else {
    set.choice("--precision", o.precision, {"fp32", "bf16", "fp16"},
               "fp32 | bf16 (autocast) | fp16 (autocast + loss scaling)");
    set.toggle("--cuda-graphs", o.cuda_graphs,
               "Capture forward, backward, all-reduce and optimizer step into one CUDA graph after warm-up and "
               "replay it (fp32/bf16, NCCL; otherwise says why and runs eagerly)");
  }
  set.integer("--graph-warmup", o.graph_warmup, "Eager steps of each batch size before its CUDA graph is captured")
      .range(1, 1000);
  set.negatedToggle("--no-cudnn-benchmark", o.cudnn_benchmark,
                    "Do not let cuDNN time its algorithms per input shape (on by default)");
  if (!bench) {
    set.toggle("--deterministic", o.deterministic,
               "Deterministic cuDNN algorithms, no benchmarking (torch.backends.cudnn.deterministic)");
  }
}

void declareParallel(OptionSet& set, ParallelOptions& o) {
  set.choice("--backend", o.backend, {"auto", "nccl", "gloo"},
             "Collective backend: nccl on GPUs, gloo on CPUs; auto: $DTRAIN_BACKEND, else nccl when a GPU is "
             "visible");
  set.integer("--timeout", o.timeout_s, "Seconds a collective may take before the job fails")
      .range(1, kMaxTimeoutSeconds)
      .unit("seconds");
  set.number("--bucket-mb", o.bucket_mb, "Gradient bucket size in MiB (the first bucket is 1 MiB)")
      .above(0)
      .atMost(16384)
      .unit("MiB");
}

void declareData(OptionSet& set, DataOptions& o) {
  set.choice("--dataset", o.dataset, {"fashion-mnist", "mnist", "cifar10", "synthetic"}, "The data set");
  set.path("--data-dir", o.data_dir,
           "Directory of the data set's files (fashion-mnist default: /usr/share/datasets/fashion-mnist)")
      .existingDirectory();
  set.integer("--batch-size", o.batch_size, "Samples per rank per step").range(1, kMaxBatch);
  set.integer("--loader-workers", o.loader_workers, "Background threads assembling batches").range(0, 256);
  set.toggle("--data-on-gpu", o.on_gpu,
             "Keep the whole data set on the GPU; shuffle and augment there once per epoch");
  set.toggle("--data-on-device", o.on_device,
             "(testing) --data-on-gpu's batches on whatever device the job runs, the CPU included")
      .hide();
  set.integer("--synthetic-samples", o.synthetic_samples, "Size of the synthetic training set")
      .range(1, int64_t{1} << 31);
  set.integer("--synthetic-image-size", o.synthetic_image_size, "Height = width of synthetic images")
      .range(4, 4096);
}

void declareOptimizer(OptionSet& set, OptimizerOptions& o) {
  set.choice("--optimizer", o.kind, {"sgd", "adamw"}, "The optimizer");
  set.number("--lr", o.lr, "Peak learning rate").range(0, 100);
  set.number("--momentum", o.momentum, "SGD momentum").atLeast(0).below(1);
  set.toggle("--nesterov", o.nesterov, "Nesterov momentum (SGD)");
  set.number("--weight-decay", o.weight_decay, "Weight decay (decoupled for AdamW)").range(0, 10);
  set.number("--clip-grad-norm", o.clip_grad_norm, "Clip gradients to this global L2 norm (0: off)").atLeast(0);
}

void declareSchedule(OptionSet& set, ScheduleOptions& o) {
  set.integer("--epochs", o.epochs, "Passes over the training set").range(1, kMaxEpochs);
  set.integer("--max-steps", o.max_steps, "Stop after this many steps (0: run all epochs)").range(0, kMaxSteps);
  set.choice("--schedule", o.kind, {"constant", "cosine", "step"}, "Learning-rate schedule");
  set.number("--warmup", o.warmup_epochs, "Linear warmup, in epochs (fractions allowed)")
      .range(0, static_cast<double>(kMaxEpochs))
      .unit("epochs");
  set.number("--step-epochs", o.step_epochs, "Step schedule: multiply the LR by --gamma every N epochs")
      .above(0)
      .atMost(static_cast<double>(kMaxEpochs))
      .unit("epochs")
      .defaultMeans("epochs / 3");
  set.number("--gamma", o.gamma, "Step schedule decay factor").above(0).atMost(1);
}

void declareCheckpoint(OptionSet& set, CheckpointOptions& o) {
  set.path("--checkpoint-dir", o.dir, "Where rank 0 writes checkpoints (none if empty)");
  set.integer("--checkpoint-every", o.every, "Checkpoint every N steps (0: at the end of each epoch)")
      .range(0, kMaxSteps);
  set.integer("--keep", o.keep, "Checkpoints kept (the newest)").range(1, 1'000'000);
  set.text("--resume", o.resume,
           "auto (newest valid checkpoint in --checkpoint-dir, if any) | a checkpoint file | none")
      .check(
          [](const std::string& text) -> std::string {
            if (text.empty() || text == "auto" || text == "none") return "";
            struct stat st {};
            if (::stat(text.c_str(), &st) != 0) return "no such file";
            return S_ISDIR(st.st_mode) ? "a directory" : "";
          },
          "auto, none or an existing checkpoint file");
}

void declareObservability(OptionSet& set, ObservabilityOptions& o) {
  set.integer("--eval-every", o.eval_every, "Evaluate on the test set every N epochs (0: at the end only)")
      .range(0, kMaxEpochs);
  set.integer("--log-every", o.log_every, "Progress every N steps").range(1, kMaxSteps);
  set.path("--metrics-jsonl", o.metrics_jsonl, "Append step/eval/summary records as JSON lines here").creatable();
  set.choice("--progress", o.progress, {"auto", "bar", "lines", "none"},
             "Progress display: a bar on a terminal (auto), plain lines, or none");
  set.toggle("--print-bucket-timeline", o.print_bucket_timeline,
             "At the end, print when each gradient bucket's all-reduce ran against the end of backward");
  set.path("--timeline", o.timeline,
           "Write a Chrome trace (chrome://tracing, Perfetto) of --timeline-steps steps here: forward, backward, "
           "each bucket's all-reduce, optimizer and data wait, one row per rank")
      .creatable();
  set.integer("--timeline-steps", o.timeline_steps, "Steps the --timeline trace covers, after warm-up")
      .range(1, 100'000);
  set.port("--metrics-port", o.metrics_port,
           "Serve Prometheus metrics at http://HOST:(PORT + LOCAL_RANK)/metrics while training")
      .zeroAllowed("off");
}

}  // namespace

void declareTrainOptions(OptionSet& set, TrainOptions& o) {
  declareModel(set, o.model, /*with_stem=*/false);
  declareData(set, o.data);
  declareSchedule(set, o.schedule);
  declareOptimizer(set, o.optimizer);
  declareExecution(set, o.execution, /*bench=*/false);
  declareParallel(set, o.parallel);
  declareCheckpoint(set, o.checkpoint);
  declareObservability(set, o.observe);
  set.integer("--seed", o.seed, "Seed of model init, shuffling and augmentation");
}

void declareBenchTrainOptions(OptionSet& set, BenchTrainOptions& o) {
  declareModel(set, o.model, /*with_stem=*/true);
  set.integer("--image-size", o.input.image_size, "Height = width of the synthetic images").range(4, 4096);
  set.integer("--batch-size", o.input.batch_size, "Samples per GPU per step").range(1, kMaxBatch);
  set.integer("--classes", o.input.classes, "Classes of the synthetic labels").range(2, 1'000'000);
  declareExecution(set, o.execution, /*bench=*/true);
  declareParallel(set, o.parallel);
  set.integer("--steps", o.steps, "Timed steps").range(1, 10'000'000);
  set.integer("--warmup", o.warmup, "Untimed steps first (the CUDA graph is captured among them)")
      .range(0, 10'000'000);
  set.toggle("--breakdown", o.breakdown,
             "With --no-cuda-graphs: also time forward, backward, all-reduce and optimizer with CUDA events");
  set.path("--result-file", o.result_file, "(internal) where a worker group's rank 0 writes its result")
      .creatable()
      .hide();
}

void checkTrainOptions(const TrainOptions& options) {
  TrainOptions copy = options;
  OptionSet set("dtrain train");
  declareTrainOptions(set, copy);
  set.checkAll();
  const std::string& resume = options.checkpoint.resume;
  if (resume == "auto" && options.checkpoint.dir.empty()) {
    throw ConfigError("--resume auto needs --checkpoint-dir (where to look for checkpoints)");
  }
}

void checkBenchTrainOptions(const BenchTrainOptions& options) {
  BenchTrainOptions copy = options;
  OptionSet set("dtrain bench train");
  declareBenchTrainOptions(set, copy);
  set.checkAll();
  if (options.execution.cuda_graphs && options.warmup <= options.execution.graph_warmup) {
    throw ConfigError("--warmup " + std::to_string(options.warmup) +
                      " leaves no room to capture the CUDA graph after " +
                      std::to_string(options.execution.graph_warmup) +
                      " eager steps; expected --warmup > --graph-warmup");
  }
}

}  // namespace dtrain
