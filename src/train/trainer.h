// The training job behind `dtrain train`: built-in models and data sets,
// DataParallel, an optimizer with a schedule, AMP, evaluation, checkpoints
// and progress output. Library users with their own loop use DataParallel
// and friends directly (examples/).
#pragma once

#include <cstdint>
#include <string>

namespace dtrain {

struct TrainConfig {
  std::string model = "cnn";               // mlp | cnn | resnet18 | resnet34 | resnet50
  std::string dataset = "fashion-mnist";   // fashion-mnist | mnist | cifar10 | synthetic
  std::string data_dir;                    // default per data set (fashion-mnist: Debian's path)
  int64_t epochs = 3;
  int64_t batch_size = 64;                 // per rank
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 5e-4;
  bool nesterov = false;
  std::string optimizer = "sgd";           // sgd | adamw
  std::string schedule = "cosine";         // constant | cosine | step
  double warmup_epochs = 0.2;
  double step_epochs = 0;                  // step schedule: decay every this many epochs (default epochs/3)
  double gamma = 0.1;
  double clip_grad_norm = 0;               // 0 = off
  std::string precision = "fp32";          // fp32 | bf16 | fp16
  bool channels_last = false;
  double bucket_mb = 25;
  std::string checkpoint_dir;              // empty = no checkpoints
  int64_t checkpoint_every = 0;            // steps; 0 = at the end of each epoch only
  int keep_checkpoints = 3;
  std::string resume;                      // "" | auto | path
  int64_t eval_every = 1;                  // epochs; 0 = only at the end
  uint64_t seed = 0;
  int64_t log_every = 50;                  // steps
  std::string metrics_jsonl;               // rank 0 appends one JSON object per line
  int loader_workers = 2;
  int64_t max_steps = 0;                   // stop after this many steps (0 = all epochs)
  int64_t synthetic_samples = 4096;        // synthetic data set size (train; test is a quarter)
  int64_t synthetic_image_size = 32;
  std::string backend = "auto";
  int64_t timeout_s = 600;                 // collective timeout
  std::string progress = "auto";           // auto | bar | lines | none
  bool print_bucket_timeline = false;      // print the bucket timeline of the last backward
  std::string timeline;                    // write a Chrome trace of some steps here
  int64_t timeline_steps = 20;             // how many (after warm-up and graph capture)
  int metrics_port = 0;                    // serve Prometheus metrics on this port + LOCAL_RANK (0: off)
  bool cuda_graphs = false;                // capture the whole step into a CUDA graph after warm-up
  int64_t graph_warmup = 3;                // eager steps of a batch size before its capture
  bool data_on_gpu = false;                // keep the data set on the device, build batches there
  bool cudnn_benchmark = true;             // let cuDNN time its algorithms per shape
  bool deterministic = false;              // deterministic cuDNN algorithms (and no benchmark)
};

// Runs the job on this rank; returns the process exit code (0 on success).
// Bad configuration throws ConfigError naming the flag and what was expected.
int runTraining(const TrainConfig& config);

}  // namespace dtrain

// The same, with C linkage: the dtrain binary loads the runtime with dlopen
// when `dtrain train` runs and calls this.
extern "C" int dtrain_run_training(const dtrain::TrainConfig* config);
