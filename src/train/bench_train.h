// The worker of `dtrain bench train`: training throughput of one rank of a
// data-parallel group on a synthetic batch resident on the device (no data
// loading at all), the same step `dtrain train` runs (TrainStep: eager or a
// CUDA graph), SGD with momentum, cross-entropy.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain {

struct BenchTrainConfig {
  std::string model = "resnet50";
  std::string stem = "imagenet";    // resnets: imagenet (torchvision's) | cifar | auto
  int64_t image_size = 32;
  int64_t channels = 3;
  int64_t classes = 10;
  int64_t batch_size = 64;          // per rank
  std::string precision = "fp32";   // fp32 | bf16
  bool channels_last = false;
  int64_t steps = 100;              // timed
  int64_t warmup = 20;              // untimed, before the timed steps (graph capture happens here)
  bool cuda_graphs = true;
  int64_t graph_warmup = 3;
  bool cudnn_benchmark = true;
  double bucket_mb = 25;
  std::string backend = "auto";
  int64_t timeout_s = 600;
  bool breakdown = false;           // also time forward / backward / all-reduce / optimizer of eager steps
  std::string result_file;          // rank 0 writes its JSON result here; empty: stdout
};

// Runs on every rank of the group (RANK/WORLD_SIZE/... from the launcher).
// Rank 0 writes one JSON object: gpus, samples_per_s, step_ms, loss, graphs,
// versions, and with breakdown the time split. Returns the exit code.
int runBenchTrain(const BenchTrainConfig& config);

}  // namespace dtrain

extern "C" int dtrain_run_bench_train(const dtrain::BenchTrainConfig* config);
