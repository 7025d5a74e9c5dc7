#include "stream_cases.h"

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "device_buffer.h"

namespace dtrain::testing {
namespace {

constexpr std::chrono::seconds kStreamWaitLimit{60};
constexpr size_t kStreamCount = 1031;

}  // namespace

void checkCallerStreamOrdering(Communicator& comm, int device) {
  const int rank = comm.rank();
  const int size = comm.size();
  // 32 MiB: the collective takes long enough that an unordered copy would
  // visibly race it.
  constexpr size_t kElements = size_t{8} << 20;
  constexpr size_t kBytes = kElements * sizeof(float);
  cudaStream_t stream = nullptr;
  cudaOrThrow(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  // Pinned, so that the copies are truly asynchronous to the host.
  void* pinned_in_bytes = nullptr;
  void* pinned_out_bytes = nullptr;
  cudaOrThrow(cudaMallocHost(&pinned_in_bytes, kBytes), "cudaMallocHost");
  cudaOrThrow(cudaMallocHost(&pinned_out_bytes, kBytes), "cudaMallocHost");
  float* pinned_in = static_cast<float*>(pinned_in_bytes);
  float* pinned_out = static_cast<float*>(pinned_out_bytes);
  DeviceBuffer buffer(DType::kFloat32, kElements, device);
  for (size_t i = 0; i < kElements; ++i) {
    pinned_in[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1));
    pinned_out[i] = -1.0f;
  }
  if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  cudaOrThrow(cudaMemcpyAsync(buffer.data(), pinned_in, kBytes, cudaMemcpyHostToDevice, stream), "upload");
  std::shared_ptr<Work> work = comm.allreduce(buffer.all(stream), buffer.all(stream));
  cudaOrThrow(cudaMemcpyAsync(pinned_out, buffer.data(), kBytes, cudaMemcpyDeviceToHost, stream), "download");
  cudaOrThrow(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const float rank_sum = static_cast<float>(size * (size + 1) / 2);
  for (size_t i = 0; i < kElements; ++i) {
    const float want = rank_sum * static_cast<float>(i % 7 + 1);
    if (pinned_out[i] != want) {
      throw std::runtime_error("caller-stream ordering (world " + std::to_string(size) + "): element " +
                               std::to_string(i) + " is " + std::to_string(pinned_out[i]) + ", expected " +
                               std::to_string(want) + " (the stream did not wait for the allreduce)");
    }
  }
  work->wait(kStreamWaitLimit);
  cudaFreeHost(pinned_in);
  cudaFreeHost(pinned_out);
  cudaStreamDestroy(stream);
}

void checkGraphCapture(Communicator& comm, int device) {
  const std::string what = "graph capture (world " + std::to_string(comm.size()) + ")";
  constexpr int kReplays = 3;
  cudaStream_t stream = nullptr;
  cudaOrThrow(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  DeviceBuffer buffer(DType::kFloat32, kStreamCount, device);
  buffer.upload(std::vector<double>(kStreamCount, 1.0));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t replayable = nullptr;
  cudaOrThrow(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  std::shared_ptr<Work> work = comm.allreduce(buffer.all(stream), buffer.all(stream));
  cudaOrThrow(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  expectThat(work->isCompleted(), what + ": a captured Work is not complete");
  work->wait(std::chrono::seconds(1));
  cudaOrThrow(cudaGraphInstantiate(&replayable, graph, 0), "cudaGraphInstantiate");
  for (int replay = 0; replay < kReplays; ++replay) {
    cudaOrThrow(cudaGraphLaunch(replayable, stream), "cudaGraphLaunch");
  }
  cudaOrThrow(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  expectValues(buffer.download(), std::vector<double>(kStreamCount, std::pow(comm.size(), kReplays)), 0, what);
  // NCCL keeps resources for captured work until the graph is destroyed.
  cudaGraphExecDestroy(replayable);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  std::shared_ptr<Work> after = comm.allreduce(buffer.all(), buffer.all());
  after->wait(kStreamWaitLimit);
  expectValues(buffer.download(), std::vector<double>(kStreamCount, std::pow(comm.size(), kReplays + 1)), 0,
               what + ", then an ordinary allreduce");
}

}  // namespace dtrain::testing
