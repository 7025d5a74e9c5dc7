#include "dtrain/init.h"

#include <exception>
#include <optional>

#include "comm/communicator.h"
#include "comm/world.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "train/train_settings.h"
#include "store/hash_store.h"
#include "store/store.h"

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace dtrain {
namespace {

bool cudaUsable() {
#if DTRAIN_TORCH_CUDA
  return c10::cuda::device_count() > 0;
#else
  return false;
#endif
}

std::string chooseBackend(const std::string& requested) {
  std::string backend = requested;
  if (backend == "auto") backend = backendSetting();
  if (backend == "auto") {
    return cudaUsable() && backendAvailable("nccl") ? "nccl" : "gloo";
  }
  if (backend != "nccl" && backend != "gloo") {
    throw ConfigError("backend '" + backend + "' is unknown; expected auto, nccl or gloo (DTRAIN_BACKEND)");
  }
  if (!backendAvailable(backend)) {
    throw ConfigError("backend '" + backend + "' was not built into this dtrain");
  }
  if (backend == "nccl" && !cudaUsable()) {
    throw ConfigError("backend 'nccl' needs a CUDA GPU, but this libtorch sees none"
                      " (CPU-only build or no visible device); use gloo");
  }
  return backend;
}

}  // namespace

Context::Context(std::unique_ptr<World> world, std::shared_ptr<Communicator> communicator, torch::Device device,
                 std::chrono::milliseconds collective_timeout)
    : world_(std::move(world)),
      communicator_(std::move(communicator)),
      device_(device),
      collective_timeout_(collective_timeout) {}

Context::~Context() {
  // Unwinding from an error: the peers may be gone or out of reach, so the
  // exit barrier gets a short bound rather than the collective timeout.
  const bool failing = std::uncaught_exceptions() > 0;
  communicator_.reset();
  try {
    std::optional<StoreDeadlineScope> bounded;
    if (failing) bounded.emplace(std::chrono::seconds(2));
    leaveWorld(*world_, collective_timeout_);
  } catch (const std::exception& e) {
    DTRAIN_LOG_WARN("leaving the job's store failed: " << e.what());
  }
}

std::shared_ptr<Communicator> Context::newCommunicator(const std::string& name) {
  CommunicatorOptions options;
  options.store_prefix = "train/comm/" + name;
  if (device_.is_cuda()) options.device = device_.index();
  return createCommunicator(communicator_->backendName(), world_->store, world_->rank, world_->size, options);
}

int Context::rank() const { return world_->rank; }
int Context::size() const { return world_->size; }
int Context::localRank() const { return world_->local_rank; }
int Context::localWorldSize() const { return world_->local_world_size; }
std::string Context::backend() const { return communicator_->backendName(); }

void Context::barrier() {
  std::vector<double> one{0.0};
  allreduceSum(one);
}

void Context::allreduceSum(std::vector<double>& values) {
  if (values.empty()) return;
  torch::Tensor t = torch::tensor(values, torch::kFloat64).to(device_);
  Buffer buffer{t.data_ptr(), static_cast<size_t>(t.numel()), DType::kFloat64,
                device_.is_cuda() ? Device::cuda(device_.index()) : Device::cpu(), nullptr};
  AllreduceOptions options;
  options.timeout = collective_timeout_;
  communicator_->allreduce(buffer, buffer, options)->wait(collective_timeout_);
  torch::Tensor host = t.cpu();
  for (size_t i = 0; i < values.size(); ++i) values[i] = host[static_cast<int64_t>(i)].item<double>();
}

std::shared_ptr<Context> init(const InitOptions& options) {
  auto world = std::make_unique<World>();
  if (!envString("WORLD_SIZE") && !envString("RANK")) {
    world->store = std::make_shared<HashStore>();  // a job of one process
  } else {
    *world = worldFromEnvironment();
  }
  const std::string backend = chooseBackend(options.backend);
  torch::Device device = torch::kCPU;
  CommunicatorOptions comm_options;
  comm_options.store_prefix = "train/comm";
  comm_options.init_timeout = options.init_timeout;
  if (backend == "nccl") {
#if DTRAIN_TORCH_CUDA
    const int count = c10::cuda::device_count();
    if (world->local_rank >= count) {
      throw ConfigError("LOCAL_RANK=" + std::to_string(world->local_rank) + " but only " + std::to_string(count) +
                        " GPU(s) are visible; expected one GPU per local rank (--nproc-per-node <= GPUs)");
    }
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(world->local_rank));
#endif
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(world->local_rank));
    comm_options.device = world->local_rank;
  }
  std::shared_ptr<Communicator> comm =
      createCommunicator(backend, world->store, world->rank, world->size, comm_options);
  return std::make_shared<Context>(std::move(world), std::move(comm), device, options.collective_timeout);
}

}  // namespace dtrain
