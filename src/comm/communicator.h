// Communicator: collectives over raw buffers (comm/). No torch.
//
// Contract:
// - Every rank of the group calls the same collectives in the same order
//   (like NCCL and Gloo). Each call gets the next sequence number.
// - In-place when send.data == recv.data. Sizes: allreduce/broadcast send and
//   recv have `count` elements; allgather recv has size()*send.count;
//   reduce_scatter send has size()*recv.count. A mismatch is a ConfigError.
//   As in NCCL, allgather is also in place when send is this rank's slot of
//   recv (recv.data + rank*send.count elements), and reduceScatter when recv
//   is this rank's chunk of send.
// - Calls return at once with a Work; failures are stored in it. An operation
//   that does not finish within options.timeout fails with CommError naming the
//   operation, its sequence number and the ranks that never arrived.
// - A dtype/op/device the backend cannot do throws ConfigError naming the
//   backend ("gloo does not support ...").
// - After a failure the communicator is broken: later calls fail at once.
// - send and recv pair up between two ranks in the order they are called;
//   sendRecv sends one buffer and receives another at once (one NCCL group,
//   or both posted before either is waited for on Gloo), so that two ranks
//   exchanging, a ring shifting (nccl-tests' sendrecv) or a pipeline's
//   neighbours passing activations one way and gradients the other cannot
//   wait on each other's send. send_peer and recv_peer may be equal.
// - reduce: every rank's send reduced into root's recv (recv.count ==
//   send.count on every rank; only root's recv is written). gather: every
//   rank's send into root's recv in rank order (root's recv.count ==
//   size() * send.count). scatter: root's send (size() * recv.count) part r
//   to rank r's recv. alltoall: part j of rank i's send (send.count ==
//   recv.count, a multiple of size()) into part i of rank j's recv; in place
//   (send.data == recv.data) on Gloo, where the input is staged first.
#pragma once

#include <memory>
#include <string>

#include "comm/types.h"
#include "comm/work.h"

namespace dtrain {

class Store;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backendName() const = 0;

  virtual std::shared_ptr<Work> allreduce(const Buffer& send, const Buffer& recv,
                                          const AllreduceOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> broadcast(const Buffer& buffer, const BroadcastOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> allgather(const Buffer& send, const Buffer& recv,
                                          const AllgatherOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> reduceScatter(const Buffer& send, const Buffer& recv,
                                              const ReduceScatterOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> barrier(const BarrierOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> send(const Buffer& buffer, int peer, const SendRecvOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> recv(const Buffer& buffer, int peer, const SendRecvOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> sendRecv(const Buffer& send, int send_peer, const Buffer& recv, int recv_peer,
                                         const SendRecvOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> reduce(const Buffer& send, const Buffer& recv, const ReduceOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> gather(const Buffer& send, const Buffer& recv, const GatherOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> scatter(const Buffer& send, const Buffer& recv, const ScatterOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> alltoall(const Buffer& send, const Buffer& recv,
                                         const AlltoallOptions& options = {}) = 0;
};

struct CommunicatorOptions {
  // Prefix of this group's keys in the store, e.g. "/run/<id>/gen/<n>/comm/0".
  std::string store_prefix = "comm";
  // How long bootstrap (connect, id exchange) may take.
  Milliseconds init_timeout{std::chrono::minutes(5)};
  // CUDA device for the NCCL backend.
  int device = 0;
  // How often each rank publishes its progress (for naming stalled ranks).
  Milliseconds progress_interval{std::chrono::milliseconds(200)};
};

// "gloo" or "nccl"; ConfigError naming the backend if it is unknown or was
// not built in.
std::unique_ptr<Communicator> createCommunicator(const std::string& backend,
                                                 std::shared_ptr<Store> store, int rank, int size,
                                                 const CommunicatorOptions& options = {});
bool backendAvailable(const std::string& backend);

// Host-side helpers shared by backends and tests.
// Elementwise dst = reduce(dst, src) over count elements of dtype. kAvg
// accumulates a sum like kSum: divide once at the end with divideInPlace.
// Half and bfloat16 round to nearest even; integers wrap.
void reduceInto(void* dst, const void* src, size_t count, DType dtype, ReduceOp op);
// dst /= divisor elementwise (avg); integer dtypes use integer division.
void divideInPlace(void* dst, size_t count, DType dtype, int64_t divisor);

}  // namespace dtrain
