#include "bench/cuda_graph.h"

#include "common/error.h"

#ifdef DTRAIN_HAVE_NCCL
#include "bench/cuda_runtime.h"
#endif

namespace dtrain::bench {

#ifdef DTRAIN_HAVE_NCCL

struct GraphStream::State {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;

  void dropGraph() {
    const CudaRuntime* cuda = cudaRuntime();
    if (exec != nullptr && cuda != nullptr) cuda->graphExecDestroy(exec);
    if (graph != nullptr && cuda != nullptr) cuda->graphDestroy(graph);
    exec = nullptr;
    graph = nullptr;
  }
};

GraphStream::GraphStream(Device device) : state_(std::make_unique<State>()) {
  if (device.type != DeviceType::kCuda) {
    throw ConfigError("-G/--cudagraph needs CUDA (the nccl backend); gloo runs on the CPU");
  }
  const CudaRuntime& cuda = requireCudaRuntime();
  DTRAIN_BENCH_CUDA(cuda.setDevice(device.index));
  DTRAIN_BENCH_CUDA(cuda.streamCreateWithFlags(&state_->stream, cudaStreamNonBlocking));
}

GraphStream::~GraphStream() {
  state_->dropGraph();
  if (state_->stream != nullptr) requireCudaRuntime().streamDestroy(state_->stream);
}

void* GraphStream::stream() const { return state_->stream; }

void GraphStream::beginCapture() {
  DTRAIN_BENCH_CUDA(requireCudaRuntime().streamBeginCapture(state_->stream, cudaStreamCaptureModeThreadLocal));
}

void GraphStream::endCapture() {
  state_->dropGraph();
  const CudaRuntime& cuda = requireCudaRuntime();
  DTRAIN_BENCH_CUDA(cuda.streamEndCapture(state_->stream, &state_->graph));
  DTRAIN_BENCH_CUDA(cuda.graphInstantiateWithFlags(&state_->exec, state_->graph, 0));
}

void GraphStream::launch(int times) {
  const CudaRuntime& cuda = requireCudaRuntime();
  for (int i = 0; i < times; ++i) DTRAIN_BENCH_CUDA(cuda.graphLaunch(state_->exec, state_->stream));
}

void GraphStream::synchronize() { DTRAIN_BENCH_CUDA(requireCudaRuntime().streamSynchronize(state_->stream)); }

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
