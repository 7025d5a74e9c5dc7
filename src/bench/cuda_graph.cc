#include "bench/cuda_graph.h"

#include "common/error.h"

#ifdef DTRAIN_HAVE_NCCL
#include "gpu/cuda_check.h"
#endif

namespace dtrain::bench {

#ifdef DTRAIN_HAVE_NCCL

struct GraphStream::State {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;

  void dropGraph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    exec = nullptr;
    graph = nullptr;
  }
};

GraphStream::GraphStream(Device device) : state_(std::make_unique<State>()) {
  if (device.type != DeviceType::kCuda) {
    throw ConfigError("-G/--cudagraph needs CUDA (the nccl backend); gloo runs on the CPU");
  }
  DTRAIN_CUDA_CHECK(cudaSetDevice(device.index));
  DTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking));
}

GraphStream::~GraphStream() {
  state_->dropGraph();
  if (state_->stream != nullptr) cudaStreamDestroy(state_->stream);
}

void* GraphStream::stream() const { return state_->stream; }

void GraphStream::beginCapture() {
  DTRAIN_CUDA_CHECK(cudaStreamBeginCapture(state_->stream, cudaStreamCaptureModeThreadLocal));
}

void GraphStream::endCapture() {
  state_->dropGraph();
  DTRAIN_CUDA_CHECK(cudaStreamEndCapture(state_->stream, &state_->graph));
  DTRAIN_CUDA_CHECK(cudaGraphInstantiateWithFlags(&state_->exec, state_->graph, 0));
}

void GraphStream::launch(int times) {
  for (int i = 0; i < times; ++i) DTRAIN_CUDA_CHECK(cudaGraphLaunch(state_->exec, state_->stream));
}

void GraphStream::synchronize() { DTRAIN_CUDA_CHECK(cudaStreamSynchronize(state_->stream)); }

#else

struct GraphStream::State {};

GraphStream::GraphStream(Device device) {
  (void)device;
  throw ConfigError("-G/--cudagraph needs CUDA; this dtrain was built without CUDA/NCCL");
}
GraphStream::~GraphStream() = default;
void* GraphStream::stream() const { return nullptr; }
void GraphStream::beginCapture() {}
void GraphStream::endCapture() {}
void GraphStream::launch(int) {}
void GraphStream::synchronize() {}

#endif

}  // namespace dtrain::bench
