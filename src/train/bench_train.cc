#include "train/bench_train.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "dtrain/amp.h"
#include "dtrain/data_parallel.h"
#include "dtrain/init.h"
#include "dtrain/optim.h"
#include "models/model.h"
#include "train/train_step.h"

#if DTRAIN_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#if DTRAIN_HAVE_NCCL
#include <nccl.h>
#endif
#endif

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;

void validate(const BenchTrainConfig& c) {
  auto positive = [](int64_t v, const char* flag) {
    if (v <= 0) throw ConfigError(std::string(flag) + " must be > 0, got " + std::to_string(v));
  };
  positive(c.batch_size, "--batch-size");
  positive(c.image_size, "--image-size");
  positive(c.steps, "--steps");
  positive(c.classes, "--classes");
  positive(c.graph_warmup, "--graph-warmup");
  if (c.warmup < 0) throw ConfigError("--warmup must be >= 0, got " + std::to_string(c.warmup));
  if (c.cuda_graphs && c.warmup <= c.graph_warmup) {
    throw ConfigError("--warmup " + std::to_string(c.warmup) + " leaves no room to capture the CUDA graph after " +
                      std::to_string(c.graph_warmup) + " eager steps; expected --warmup > --graph-warmup");
  }
}

void synchronize(const torch::Device& device) {
#if DTRAIN_TORCH_CUDA
  if (device.is_cuda()) DTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
#else
  (void)device;
#endif
}

// The largest of one value per rank.
double maxOverRanks(Context& ctx, double value) {
  std::vector<double> slots(static_cast<size_t>(ctx.size()), 0.0);
  slots[static_cast<size_t>(ctx.rank())] = value;
  ctx.allreduceSum(slots);
  return *std::max_element(slots.begin(), slots.end());
}

nlohmann::json versions(const torch::Device& device) {
  nlohmann::json v;
  v["torch"] = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
               std::to_string(TORCH_VERSION_PATCH);
#if DTRAIN_TORCH_CUDA
  if (device.is_cuda()) {
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device.index());
    v["device"] = prop.name;
    v["cuda_runtime"] = std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
    v["cuda_driver_api"] = std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
#if DTRAIN_HAVE_NCCL
    int nccl = 0;
    ncclGetVersion(&nccl);
    v["nccl"] = std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." +
                std::to_string(nccl % 100);
#endif
  }
#else
  (void)device;
#endif
  return v;
}

}  // namespace

int runBenchTrain(const BenchTrainConfig& config) {
  validate(config);
  const Precision precision = parsePrecision(config.precision);
  if (precision == Precision::kFp16) {
    throw ConfigError("--precision fp16 is not benchmarked (its loss scaling is host-driven); use fp32 or bf16");
  }
  at::globalContext().setAllowTF32CuDNN(true);  // PyTorch's defaults (float32 matmuls stay IEEE)
  at::globalContext().setBenchmarkCuDNN(config.cudnn_benchmark);

  InitOptions init_options;
  init_options.backend = config.backend;
  init_options.collective_timeout = std::chrono::seconds(config.timeout_s);
  std::shared_ptr<Context> ctx = init(init_options);
  const JobStreamGuard job_stream(ctx->device());  // a capturable stream for everything on the device
  const torch::Device device = ctx->device();

  torch::manual_seed(1234);
  models::ModelOptions model_options;
  model_options.in_channels = config.channels;
  model_options.num_classes = config.classes;
  model_options.image_size = config.image_size;
  model_options.stem = config.stem;
  std::shared_ptr<models::Model> model = models::createModel(config.model, model_options);
  if (config.channels_last) useChannelsLast(*model);
  model->to(device);
  model->train();

  DataParallelOptions dp_options;
  dp_options.bucket_mb = config.bucket_mb;
  dp_options.timeout = std::chrono::seconds(config.timeout_s);
  dp_options.record_timeline = config.breakdown && !config.cuda_graphs;
  DataParallel dp(model, ctx->communicator(), dp_options);
  SGDOptions sgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  sgd.weight_decay = 5e-4;
  std::unique_ptr<Optimizer> optimizer = makeSGD(dp.slabs(), sgd);
  GradScaler scaler(GradScalerOptions{.enabled = false});

  TrainStepOptions step_options;
  step_options.cuda_graphs = config.cuda_graphs;
  step_options.warmup_steps = config.graph_warmup;
  step_options.precision = precision;
  step_options.communicator_capturable = ctx->backend() == "nccl";
  TrainStep step([&model](const torch::Tensor& x) { return model->forward(x); }, dp, *optimizer, scaler, device,
                 step_options);

  // One fixed synthetic batch per rank, resident on the device.
  torch::Tensor images = torch::randn({config.batch_size, config.channels, config.image_size, config.image_size},
                                      torch::TensorOptions().device(device));
  if (config.channels_last) images = images.contiguous(at::MemoryFormat::ChannelsLast);
  torch::Tensor labels = torch::randint(config.classes, {config.batch_size},
                                        torch::TensorOptions().dtype(torch::kLong).device(device));

  for (int64_t i = 0; i < config.warmup; ++i) step.run(images, labels);
  synchronize(device);
  ctx->barrier();
  step.zeroLossSum();
  const auto start = Clock::now();
  for (int64_t i = 0; i < config.steps; ++i) step.run(images, labels);
  synchronize(device);
  const double elapsed = maxOverRanks(*ctx, std::chrono::duration<double>(Clock::now() - start).count());
  const double loss = step.lossSum().item<double>() / static_cast<double>(config.steps);
  if (!std::isfinite(loss)) throw IoError("bench train: the loss is " + std::to_string(loss) + " (diverged)");

  nlohmann::json result;
  result["gpus"] = ctx->size();
  result["device_type"] = device.is_cuda() ? "cuda" : "cpu";
  result["backend"] = ctx->backend();
  result["step_ms"] = elapsed * 1e3 / static_cast<double>(config.steps);
  result["samples_per_s"] =
      static_cast<double>(config.batch_size * ctx->size() * config.steps) / std::max(elapsed, 1e-12);
  result["loss"] = loss;
  result["graphs"] = step.graphStatus();
  result["graphed_steps"] = step.graphedSteps();
  result["versions"] = versions(device);

#if DTRAIN_TORCH_CUDA
  if (config.breakdown && device.is_cuda() && !config.cuda_graphs) {
    // Where an eager step's GPU time goes: events around forward, backward
    // (which ends when the last bucket's all-reduce joined the compute
    // stream) and the optimizer, plus the buckets' own all-reduce times.
    constexpr int kSteps = 10;
    double forward_ms = 0, backward_ms = 0, optimizer_ms = 0, allreduce_ms = 0, exposed_ms = 0;
    for (int i = 0; i < kSteps; ++i) {
      at::cuda::CUDAEvent e0(cudaEventDefault), e1(cudaEventDefault), e2(cudaEventDefault), e3(cudaEventDefault);
      auto stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device.index()));
      e0.record(stream);
      optimizer->zeroGrad();
      torch::Tensor loss_tensor;
      {
        AutocastGuard autocast(device, precision);
        loss_tensor = torch::nn::functional::cross_entropy(model->forward(images).to(torch::kFloat), labels);
      }
      e1.record(stream);
      loss_tensor.backward();
      e2.record(stream);
      optimizer->step();
      e3.record(stream);
      e3.synchronize();
      forward_ms += e0.elapsed_time(e1);
      backward_ms += e1.elapsed_time(e2);
      optimizer_ms += e2.elapsed_time(e3);
      const BackwardTimeline timeline = dp.lastTimeline();
      double last_end = 0;
      for (const auto& b : timeline.buckets) {
        allreduce_ms += b.end_ms - b.start_ms;
        last_end = std::max(last_end, b.end_ms);
      }
      exposed_ms += std::max(0.0, last_end - timeline.backward_end_ms);
    }
    nlohmann::json split;
    split["forward_ms"] = forward_ms / kSteps;
    split["backward_ms"] = backward_ms / kSteps;
    split["allreduce_ms"] = allreduce_ms / kSteps;
    split["allreduce_exposed_ms"] = exposed_ms / kSteps;
    split["optimizer_ms"] = optimizer_ms / kSteps;
    split["gpu_busy_ms"] = (forward_ms + backward_ms + optimizer_ms) / kSteps;
    split["idle_ms"] = std::max(0.0, result["step_ms"].get<double>() - split["gpu_busy_ms"].get<double>());
    result["breakdown"] = split;
  }
#endif

  if (ctx->isMain()) {
    if (config.result_file.empty()) {
      std::cout << result.dump() << std::endl;
    } else {
      std::ofstream out(config.result_file);
      out << result.dump() << "\n";
      if (!out) throw IoError("cannot write the bench result to " + config.result_file);
    }
  }
  ctx->barrier();
  return 0;
}

}  // namespace dtrain

extern "C" int dtrain_run_bench_train(const dtrain::BenchTrainConfig* config) {
  return dtrain::runBenchTrain(*config);
}
