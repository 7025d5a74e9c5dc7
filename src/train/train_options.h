// The options of `dtrain train` and `dtrain bench train`, one narrow struct
// per concern, and their declarations (common/options.h): names, defaults,
// help and accepted values live in train_options.cc and nowhere else.
//
// Torch-free: the dtrain binary parses these without loading libtorch and
// hands the filled struct to the training runtime it loads with dlopen.
// Code that needs three fields receives the struct of their concern, never
// the whole TrainOptions.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain {

class OptionSet;

// Where the batches come from.
struct DataOptions {
  std::string dataset = "fashion-mnist";  // fashion-mnist | mnist | cifar10 | synthetic
  std::string data_dir;                   // default per data set (fashion-mnist: Debian's path)
  int64_t batch_size = 64;                // per rank
  int loader_workers = 2;
  bool on_gpu = false;                    // keep the data set on the GPU, build batches there
  bool on_device = false;                 // the same on whatever device the job runs (tests: the CPU)
  int64_t synthetic_samples = 4096;       // synthetic training set size (test: a quarter)
  int64_t synthetic_image_size = 32;
};

// Which network, and its memory format.
struct ModelSpec {
  std::string name = "cnn";     // mlp | cnn | resnet18 | resnet34 | resnet50
  std::string stem = "auto";    // resnets: auto | cifar | imagenet
  bool channels_last = false;
};

// The optimizer and its hyper-parameters.
struct OptimizerOptions {
  std::string kind = "sgd";     // sgd | adamw
  double lr = 0.05;             // peak
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 5e-4;
  double clip_grad_norm = 0;    // 0 = off
};

// How long, and the learning rate over time.
struct ScheduleOptions {
  int64_t epochs = 3;
  int64_t max_steps = 0;        // 0 = all epochs
  std::string kind = "cosine";  // constant | cosine | step
  double warmup_epochs = 0.2;
  double step_epochs = 0;       // step schedule: decay every this many epochs (0: epochs / 3)
  double gamma = 0.1;
};

// How a step runs on the device.
struct ExecutionOptions {
  std::string precision = "fp32";  // fp32 | bf16 | fp16
  bool cuda_graphs = false;        // capture the whole step after warm-up
  int64_t graph_warmup = 3;        // eager steps of a batch size before its capture
  bool cudnn_benchmark = true;
  bool deterministic = false;
};

// The process group and the gradient all-reduce.
struct ParallelOptions {
  std::string backend = "auto";  // auto | nccl | gloo ($DTRAIN_BACKEND)
  int64_t timeout_s = 600;       // collective timeout
  double bucket_mb = 25;         // gradient bucket cap (the first bucket is 1 MiB)
};

struct CheckpointOptions {
  std::string dir;         // empty = no checkpoints
  int64_t every = 0;       // steps; 0 = at the end of each epoch only
  int keep = 3;
  std::string resume;      // "" | none | auto | a file
};

// What the job reports while it runs.
struct ObservabilityOptions {
  int64_t log_every = 50;            // steps
  int64_t eval_every = 1;            // epochs; 0 = at the end only
  std::string progress = "auto";     // auto | bar | lines | none
  std::string metrics_jsonl;         // rank 0 appends one JSON object per line
  int metrics_port = 0;              // Prometheus on this port + LOCAL_RANK (0: off)
  std::string timeline;              // Chrome trace of some steps
  int64_t timeline_steps = 20;
  bool print_bucket_timeline = false;
};

struct TrainOptions {
  DataOptions data;
  ModelSpec model;
  OptimizerOptions optimizer;
  ScheduleOptions schedule;
  ExecutionOptions execution;
  ParallelOptions parallel;
  CheckpointOptions checkpoint;
  ObservabilityOptions observe;
  uint64_t seed = 0;  // model init, shuffling, augmentation
};

// The synthetic batch `dtrain bench train` trains on, resident on the device.
struct SyntheticBatchOptions {
  int64_t image_size = 32;
  int64_t channels = 3;
  int64_t classes = 10;
  int64_t batch_size = 64;  // per rank
};

struct BenchTrainOptions {
  BenchTrainOptions() {
    model.name = "resnet50";
    model.stem = "imagenet";
    execution.cuda_graphs = true;
  }
  ModelSpec model;
  SyntheticBatchOptions input;
  ExecutionOptions execution;
  ParallelOptions parallel;
  int64_t steps = 100;       // timed
  int64_t warmup = 20;       // untimed, before the timed steps (graph capture happens here)
  bool breakdown = false;    // time forward / backward / all-reduce / optimizer of eager steps
  std::string result_file;   // rank 0 writes its JSON result here; empty: stdout
};

// The declarations. Cross-option rules (--resume auto needs
// --checkpoint-dir, ...) are checked by checkTrainOptions.
void declareTrainOptions(OptionSet& set, TrainOptions& options);
void declareBenchTrainOptions(OptionSet& set, BenchTrainOptions& options);

// Every declared check and the cross-option rules; ConfigError naming the
// option, the value and what is accepted. For structs filled in by code.
void checkTrainOptions(const TrainOptions& options);
void checkBenchTrainOptions(const BenchTrainOptions& options);

}  // namespace dtrain
