// GlooCommunicator: the CPU backend, over Gloo's TCP transport.
//
// Construction bootstraps the group (bootstrap.h: rank claims, WORLD_SIZE
// agreement), starts this rank's ProgressTracker, and connects a full mesh of
// TCP pairs through the store, all within options.init_timeout.
//
// Every call validates its arguments at once (ConfigError: a CUDA buffer, a
// size or dtype mismatch, a rank out of range) and queues the operation on
// the communicator's worker thread, which runs them one at a time in call
// order; the returned Work completes when the operation finished.
//
// On the first failure (a dead peer, a timeout) the Work fails with CommError
// "gloo <op> #<seq> failed: <Gloo's reason>; <ProgressTracker diagnosis>",
// the Gloo context is dropped at once so that peers blocked on this rank see
// closed connections instead of waiting for their timeout, and every later
// operation fails immediately with the same reason.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "comm/communicator.h"

namespace gloo {
class Context;
}

namespace dtrain {

class OpQueue;
class ProgressTracker;

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<Store> store, int rank, int size,
                   const CommunicatorOptions& options);
  // Runs what is still queued, then closes the connections.
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backendName() const override { return "gloo"; }

  std::shared_ptr<Work> allreduce(const Buffer& send, const Buffer& recv,
                                  const AllreduceOptions& options = {}) override;
  std::shared_ptr<Work> broadcast(const Buffer& buffer, const BroadcastOptions& options = {}) override;
  std::shared_ptr<Work> allgather(const Buffer& send, const Buffer& recv,
                                  const AllgatherOptions& options = {}) override;
  std::shared_ptr<Work> reduceScatter(const Buffer& send, const Buffer& recv,
                                      const ReduceScatterOptions& options = {}) override;
  std::shared_ptr<Work> barrier(const BarrierOptions& options = {}) override;
  std::shared_ptr<Work> send(const Buffer& buffer, int peer, const SendRecvOptions& options = {}) override;
  std::shared_ptr<Work> recv(const Buffer& buffer, int peer, const SendRecvOptions& options = {}) override;
  std::shared_ptr<Work> sendRecv(const Buffer& send, int send_peer, const Buffer& recv, int recv_peer,
                                 const SendRecvOptions& options = {}) override;
  std::shared_ptr<Work> reduce(const Buffer& send, const Buffer& recv, const ReduceOptions& options = {}) override;
  std::shared_ptr<Work> gather(const Buffer& send, const Buffer& recv, const GatherOptions& options = {}) override;
  std::shared_ptr<Work> scatter(const Buffer& send, const Buffer& recv, const ScatterOptions& options = {}) override;
  std::shared_ptr<Work> alltoall(const Buffer& send, const Buffer& recv, const AlltoallOptions& options = {}) override;

 private:
  using Operation = std::function<void(const std::shared_ptr<gloo::Context>&, uint32_t tag)>;

  std::shared_ptr<Work> submit(const std::string& op_name, Operation operation);
  // Worker thread only.
  void execute(Work& work, const Operation& operation);

  int rank_;
  int size_;
  std::mutex submit_mutex_;
  uint64_t last_seq_ = 0;  // guarded by submit_mutex_
  std::unique_ptr<ProgressTracker> progress_;
  std::shared_ptr<gloo::Context> context_;  // worker thread only, after construction
  std::string broken_reason_;               // worker thread only; non-empty once broken
  std::unique_ptr<OpQueue> queue_;          // last: its worker uses the members above
};

std::unique_ptr<Communicator> createGlooCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                     const CommunicatorOptions& options);

}  // namespace dtrain
