// NcclCommunicator: the Communicator (comm/communicator.h) over NCCL, for
// CUDA buffers. No torch.
//
// Contract, on top of comm/communicator.h:
// - One communicator per (group, CUDA device). The constructor makes
//   options.device current on the calling thread, checks the group
//   (checkGroupConsistency), exchanges the NCCL unique id through the store
//   under options.store_prefix, and creates a non-blocking NCCL communicator;
//   a group that is not complete within options.init_timeout fails with
//   TimeoutError instead of hanging.
// - Buffers: CUDA memory on options.device (a CPU buffer is a ConfigError
//   pointing at the gloo backend). They must stay valid until the Work
//   completes.
// - Streams: every operation runs on the communicator's own stream, after
//   the work already queued on the buffer's stream (Buffer::stream, a
//   cudaStream_t), or on the legacy default stream when that is null. A given
//   buffer stream is then made to wait for the operation (an event, no host
//   sync), so whatever the caller queues on it next sees the result; this is
//   what lets gradient all-reduce overlap backward. With a null stream, call
//   Work::wait() before using the result.
// - CUDA graphs: an operation whose buffer stream is capturing is captured
//   (the communication stream joins the capture and is joined back); its Work
//   is complete at once and the watchdog does not watch graph replays.
//   Capture needs a buffer stream: the legacy default stream cannot be used.
// - In-place: allreduce and broadcast when send.data == recv.data. allgather
//   when send.data == recv.data (this rank's input in the first slot) or
//   send.data == recv.data + rank * send.count (already in its own slot);
//   reduceScatter when recv.data == send.data (result lands there) or
//   recv.data == send.data + rank * recv.count. Other overlaps are undefined.
// - send/recv: NCCL has no tags (tag must be 0); a send and a recv match in
//   order per pair of ranks. Each is its own NCCL group, so two ranks that
//   both send to each other first deadlock: order them (one sends first).
//   They are numbered apart from collectives ("p2p #n") because only two
//   ranks take part, and they are not reported to the progress tracker.
// - Failures: a watchdog thread (watchdog.h) completes Works and, when an
//   operation fails or outlives its options.timeout, aborts NCCL, fails every
//   outstanding Work with a CommError naming the operation, its sequence
//   number, NCCL's error and the ranks that never arrived, and breaks the
//   communicator: later calls throw CommError with the same reason.
// - Destruction flushes outstanding work (ncclCommFinalize, bounded by
//   options.init_timeout) and destroys the NCCL communicator; a broken one was
//   already aborted.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "comm/communicator.h"

namespace dtrain {

// Kept out of this header so that its users need no NCCL headers.
class CudaEvent;
class CudaStream;
class DeviceMemory;
class NcclCommHandle;
class NcclWatchdog;
class ProgressTracker;

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Store> store, int rank, int size, const CommunicatorOptions& options);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backendName() const override { return "nccl"; }

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

  int device() const { return device_; }
  // The communicator's own stream (benchmarks time on it).
  cudaStream_t stream() const;

 private:
  // Enqueues one operation: orders the communication stream after
  // `caller_stream` (null: the legacy default stream), runs `enqueue` on it,
  // records the completion event, orders a non-null `caller_stream` after it,
  // and hands the Work to the watchdog. A failure after the sequence number
  // was taken breaks the communicator (the ranks are out of step) and is
  // returned in the Work.
  using EnqueueFn = std::function<void(cudaStream_t stream, std::chrono::steady_clock::time_point deadline)>;
  std::shared_ptr<Work> launch(const std::string& op, bool collective, const std::string& peer_note,
                               void* caller_stream, Milliseconds timeout, const EnqueueFn& enqueue);
  std::shared_ptr<Work> sendOrRecv(bool is_send, const Buffer& buffer, int peer, const SendRecvOptions& options);
  void checkPeer(const std::string& op, int peer, const SendRecvOptions& options) const;
  void checkRoot(const std::string& op, int root) const;
  // gather (to_root) or scatter: root's `whole` buffer, part r of it to or
  // from rank r's `part` buffer.
  std::shared_ptr<Work> rooted(const std::string& op, bool to_root, const Buffer& whole, const Buffer& part, int root,
                               Milliseconds timeout);

  std::shared_ptr<Store> group_store_;  // under options.store_prefix
  const int rank_;
  const int size_;
  const int device_;
  const Milliseconds teardown_timeout_;
  std::string where_;  // "cuda:N" for messages

  std::unique_ptr<NcclCommHandle> comm_;
  std::unique_ptr<CudaStream> stream_;
  std::unique_ptr<CudaEvent> inputs_ready_;    // reused: a wait captures the event as recorded
  std::unique_ptr<DeviceMemory> barrier_word_;  // one int32, always 0
  std::unique_ptr<ProgressTracker> progress_;
  std::unique_ptr<NcclWatchdog> watchdog_;  // declared last: stops first

  // Serializes enqueues from several caller threads, so sequence numbers and
  // stream order agree (NCCL requires one order on every rank).
  std::mutex enqueue_mutex_;
  uint64_t collective_seq_ = 0;  // guarded by enqueue_mutex_
  uint64_t p2p_seq_ = 0;         // guarded by enqueue_mutex_
};

// The factory comm/communicator.cc calls for backend "nccl".
std::unique_ptr<Communicator> createNcclCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                     const CommunicatorOptions& options);

}  // namespace dtrain
