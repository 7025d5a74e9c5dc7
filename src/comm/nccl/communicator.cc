#include "comm/nccl/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/nccl/buffer_checks.h"
#include "comm/nccl/comm_handle.h"
#include "comm/nccl/cuda_resources.h"
#include "comm/nccl/types.h"
#include "comm/nccl/unique_id.h"
#include "comm/nccl/watchdog.h"
#include "comm/nccl/work.h"
#include "comm/nccl_settings.h"
#include "comm/progress_tracker.h"
#include "gpu/cuda_check.h"
#include "common/error.h"
#include "common/host.h"
#include "common/log.h"
#include "common/settings.h"
#include "store/prefix_store.h"

namespace dtrain {
namespace {

// How often the watchdog looks at outstanding Works: short enough that
// completion is reported promptly, long enough to cost nothing measurable.
constexpr Milliseconds kWatchdogPollInterval{2};

std::shared_ptr<Store> groupStore(std::shared_ptr<Store> store, const std::string& prefix) {
  if (!store) throw ConfigError("nccl communicator: no store given");
  if (prefix.empty()) return store;
  return std::make_shared<PrefixStore>(prefix, std::move(store));
}

void checkDeviceExists(int device) {
  int count = 0;
  DTRAIN_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    throw ConfigError("nccl communicator: device " + std::to_string(device) + " does not exist; this process sees " +
                      std::to_string(count) + " CUDA device(s) (check CUDA_VISIBLE_DEVICES and LOCAL_RANK)");
  }
}

// A caller stream on another GPU would make the event record fail after the
// sequence number was taken; reject it up front instead.
void checkStreamDevice(void* stream, int device, const std::string& op) {
  if (stream == nullptr) return;
  int stream_device = -1;
  DTRAIN_CUDA_CHECK(cudaStreamGetDevice(static_cast<cudaStream_t>(stream), &stream_device));
  if (stream_device != device) {
    throw ConfigError("nccl " + op + ": the buffer's stream belongs to cuda:" + std::to_string(stream_device) +
                      " but this communicator uses cuda:" + std::to_string(device));
  }
}

// One NCCL group of sends and receives: what sendRecv, gather, scatter and
// alltoall are made of (as nccl-tests builds them).
struct P2pCall {
  bool send;
  void* data;
  size_t count;
  ncclDataType_t dtype;
  int peer;
};

ncclResult_t runGroup(const std::vector<P2pCall>& calls, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t rc = ncclGroupStart();
  for (const P2pCall& c : calls) {
    if (rc != ncclSuccess && rc != ncclInProgress) break;
    rc = c.send ? ncclSend(c.data, c.count, c.dtype, c.peer, comm, stream)
                : ncclRecv(c.data, c.count, c.dtype, c.peer, comm, stream);
  }
  const ncclResult_t end = ncclGroupEnd();
  return (rc != ncclSuccess && rc != ncclInProgress) ? rc : end;
}

bool isCapturing(void* stream) {
  if (stream == nullptr) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  DTRAIN_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status));
  return status == cudaStreamCaptureStatusActive;
}

std::string messageOf(const std::exception& e) {
  if (const auto* error = dynamic_cast<const Error*>(&e)) return error->message();
  return e.what();
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                   const CommunicatorOptions& options)
    : group_store_(groupStore(std::move(store), options.store_prefix)),
      rank_(rank),
      size_(size),
      device_(options.device),
      teardown_timeout_(options.init_timeout),
      where_("cuda:" + std::to_string(options.device)) {
  // One deadline for the whole bootstrap: options.init_timeout bounds it all.
  const auto deadline = std::chrono::steady_clock::now() + options.init_timeout;
  const auto time_left = [deadline] {
    return std::max(Milliseconds(0),
                    std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now()));
  };
  checkDeviceExists(device_);
  DTRAIN_CUDA_CHECK(cudaSetDevice(device_));
  // Fails in seconds, naming the mistake (duplicate rank, wrong size, a rank
  // that never started), where NCCL init would only time out.
  checkGroupConsistency(*group_store_, rank_, size_, time_left());
  const ncclUniqueId id = exchangeNcclUniqueId(*group_store_, "nccl/unique_id", rank_, time_left());
  comm_ = std::make_unique<NcclCommHandle>(id, rank_, size_, "dtrain:" + options.store_prefix, time_left(),
                                           ncclBlockingSetting());
  stream_ = std::make_unique<CudaStream>();
  inputs_ready_ = std::make_unique<CudaEvent>();
  barrier_word_ = std::make_unique<DeviceMemory>(sizeof(int32_t));
  progress_ = std::make_unique<ProgressTracker>(group_store_, "", rank_, size_, options.progress_interval,
                                                hostName());
  watchdog_ = std::make_unique<NcclWatchdog>(*comm_, *progress_, device_, where_, kWatchdogPollInterval);
  DTRAIN_LOG_DEBUG("nccl communicator '" << options.store_prefix << "' ready: rank " << rank_ << " of " << size_
                                         << " on " << where_ << (comm_->blocking() ? ", blocking" : ", non-blocking"));
}

NcclCommunicator::~NcclCommunicator() {
  try {
    CudaDeviceGuard guard(device_);
    watchdog_->stop();
    // A broken communicator was aborted already; finalizing it would fail.
    // One destroyed while an error unwinds the stack is aborted too: its
    // finalize would wait, up to the teardown timeout, for peers that are
    // stuck on the work this rank will now never do.
    const bool unwinding = std::uncaught_exceptions() > 0;
    const bool flushed = !unwinding && !watchdog_->broken() && comm_->finalizeAndDestroy(teardown_timeout_);
    watchdog_->settleOutstanding(flushed, "the communicator was destroyed before it finished");
    // Free the CUDA objects while this communicator's device is current.
    watchdog_.reset();
    progress_.reset();
    barrier_word_.reset();
    inputs_ready_.reset();
    stream_.reset();
    comm_.reset();
  } catch (const std::exception& e) {
    DTRAIN_LOG_WARN("destroying the nccl communicator on " << where_ << ": " << e.what());
  }
}

cudaStream_t NcclCommunicator::stream() const { return stream_->get(); }

std::shared_ptr<Work> NcclCommunicator::launch(const std::string& op, bool collective, const std::string& peer_note,
                                               void* caller_stream, Milliseconds timeout, const EnqueueFn& enqueue) {
  // Most CUDA queries are refused on a capturing stream (and would break the
  // capture), so a captured stream's device goes unchecked.
  const bool capturing = isCapturing(caller_stream);
  if (!capturing) checkStreamDevice(caller_stream, device_, op);
  std::lock_guard<std::mutex> lock(enqueue_mutex_);
  watchdog_->throwIfBroken();
  CudaDeviceGuard guard(device_);
  const uint64_t seq = collective ? ++collective_seq_ : ++p2p_seq_;
  const std::string label = collective ? op + " #" + std::to_string(seq)
                                       : op + " " + peer_note + " (p2p #" + std::to_string(seq) + ")";
  std::shared_ptr<NcclWork> work;
  try {
    work = std::make_shared<NcclWork>(op, seq, label, collective, timeout);
  } catch (const std::exception& e) {
    // The sequence number is taken but nothing was enqueued: this rank is out
    // of step with the others, so the communicator cannot go on.
    watchdog_->fail(nullptr, label + " could not be set up on " + where_ + ": " + messageOf(e));
    throw;
  }
  if (collective) progress_->started(seq);
  try {
    // Legacy default stream when the caller names none: work the caller
    // queued "nowhere in particular" must land before the collective reads.
    const cudaStream_t inputs_stream =
        caller_stream != nullptr ? static_cast<cudaStream_t>(caller_stream) : cudaStreamLegacy;
    DTRAIN_CUDA_CHECK(cudaEventRecord(inputs_ready_->get(), inputs_stream));
    DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream_->get(), inputs_ready_->get(), 0));
    enqueue(stream_->get(), work->deadline());
    DTRAIN_CUDA_CHECK(cudaEventRecord(work->completionEvent(), stream_->get()));
    if (caller_stream != nullptr) {
      DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(caller_stream), work->completionEvent(), 0));
    }
  } catch (const std::exception& e) {
    watchdog_->fail(work, label + " could not be enqueued on " + where_ + ": " + messageOf(e));
    return work;
  }
  if (capturing) {
    // Captured into the caller's CUDA graph: the event waits above fork the
    // communication stream from the caller's and join it back, which capture
    // requires. Nothing runs now, so there is nothing to watch; each replay
    // runs the collective, and the graph's owner waits for the replays.
    work->completeAsCaptured();
    return work;
  }
  watchdog_->track(work);
  return work;
}

std::shared_ptr<Work> NcclCommunicator::allreduce(const Buffer& send, const Buffer& recv,
                                                  const AllreduceOptions& options) {
  const std::string op = "allreduce";
  checkNcclBuffer(send, device_, op, "send buffer");
  checkNcclBuffer(recv, device_, op, "recv buffer");
  checkSameDType(send, recv, op);
  checkCount(recv.count, send.count, op, "recv.count == send.count");
  const ncclDataType_t dtype = toNcclDataType(send.dtype);
  const ncclRedOp_t reduce = toNcclRedOp(options.op);
  return launch(op, true, "", commonStream(send, recv, op), options.timeout, [&](cudaStream_t stream, auto deadline) {
    comm_->issue("ncclAllReduce", [&](ncclComm_t comm) {
      return ncclAllReduce(send.data, recv.data, send.count, dtype, reduce, comm, stream);
    }, deadline);
  });
}

std::shared_ptr<Work> NcclCommunicator::broadcast(const Buffer& buffer, const BroadcastOptions& options) {
  const std::string op = "broadcast";
  checkNcclBuffer(buffer, device_, op, "buffer");
  if (options.root < 0 || options.root >= size_) {
    throw ConfigError("nccl broadcast: root " + std::to_string(options.root) + " is not a rank of this group of " +
                      std::to_string(size_));
  }
  const ncclDataType_t dtype = toNcclDataType(buffer.dtype);
  return launch(op, true, "", buffer.stream, options.timeout, [&](cudaStream_t stream, auto deadline) {
    comm_->issue("ncclBroadcast", [&](ncclComm_t comm) {
      return ncclBroadcast(buffer.data, buffer.data, buffer.count, dtype, options.root, comm, stream);
    }, deadline);
  });
}

std::shared_ptr<Work> NcclCommunicator::allgather(const Buffer& send, const Buffer& recv,
                                                  const AllgatherOptions& options) {
  const std::string op = "allgather";
  checkNcclBuffer(send, device_, op, "send buffer");
  checkNcclBuffer(recv, device_, op, "recv buffer");
  checkSameDType(send, recv, op);
  checkCount(recv.count, static_cast<size_t>(size_) * send.count, op, "recv.count == size() * send.count");
  const ncclDataType_t dtype = toNcclDataType(send.dtype);
  // NCCL's in-place form has this rank's input in its own slot; our
  // send.data == recv.data form has it in the first slot, so move it first
  // (rank 0's first slot is its own; for the others the slots are disjoint).
  const size_t slot_bytes = send.bytes();
  char* own_slot = static_cast<char*>(recv.data) + static_cast<size_t>(rank_) * slot_bytes;
  const bool move_into_own_slot = send.data == recv.data && rank_ != 0 && slot_bytes > 0;
  const void* input = move_into_own_slot ? own_slot : send.data;
  return launch(op, true, "", commonStream(send, recv, op), options.timeout, [&](cudaStream_t stream, auto deadline) {
    if (move_into_own_slot) {
      DTRAIN_CUDA_CHECK(cudaMemcpyAsync(own_slot, recv.data, slot_bytes, cudaMemcpyDeviceToDevice, stream));
    }
    comm_->issue("ncclAllGather", [&](ncclComm_t comm) {
      return ncclAllGather(input, recv.data, send.count, dtype, comm, stream);
    }, deadline);
  });
}

std::shared_ptr<Work> NcclCommunicator::reduceScatter(const Buffer& send, const Buffer& recv,
                                                      const ReduceScatterOptions& options) {
  const std::string op = "reduce_scatter";
  checkNcclBuffer(send, device_, op, "send buffer");
  checkNcclBuffer(recv, device_, op, "recv buffer");
  checkSameDType(send, recv, op);
  checkCount(send.count, static_cast<size_t>(size_) * recv.count, op, "send.count == size() * recv.count");
  const ncclDataType_t dtype = toNcclDataType(send.dtype);
  const ncclRedOp_t reduce = toNcclRedOp(options.op);
  // Mirror of allgather: with recv.data == send.data, reduce in NCCL's
  // in-place form (result in this rank's own slot), then move it to the front.
  const size_t slot_bytes = recv.bytes();
  char* own_slot = static_cast<char*>(send.data) + static_cast<size_t>(rank_) * slot_bytes;
  const bool move_from_own_slot = recv.data == send.data && rank_ != 0 && slot_bytes > 0;
  void* output = move_from_own_slot ? own_slot : recv.data;
  return launch(op, true, "", commonStream(send, recv, op), options.timeout, [&](cudaStream_t stream, auto deadline) {
    comm_->issue("ncclReduceScatter", [&](ncclComm_t comm) {
      return ncclReduceScatter(send.data, output, recv.count, dtype, reduce, comm, stream);
    }, deadline);
    if (move_from_own_slot) {
      DTRAIN_CUDA_CHECK(cudaMemcpyAsync(recv.data, own_slot, slot_bytes, cudaMemcpyDeviceToDevice, stream));
    }
  });
}

std::shared_ptr<Work> NcclCommunicator::reduce(const Buffer& send, const Buffer& recv, const ReduceOptions& options) {
  const std::string op = "reduce";
  checkNcclBuffer(send, device_, op, "send buffer");
  checkNcclBuffer(recv, device_, op, "recv buffer");
  checkSameDType(send, recv, op);
  checkRoot(op, options.root);
  checkCount(recv.count, send.count, op, "recv.count == send.count");
  const ncclDataType_t dtype = toNcclDataType(send.dtype);
  const ncclRedOp_t reduce = toNcclRedOp(options.op);
  return launch(op, true, "", commonStream(send, recv, op), options.timeout, [&](cudaStream_t stream, auto deadline) {
    comm_->issue("ncclReduce", [&](ncclComm_t comm) {
      return ncclReduce(send.data, recv.data, send.count, dtype, reduce, options.root, comm, stream);
    }, deadline);
  });
}

// gather, scatter and alltoall are NCCL groups of sends and receives (as
// nccl-tests builds them); this rank's own part is a device copy.
std::shared_ptr<Work> NcclCommunicator::gather(const Buffer& send, const Buffer& recv, const GatherOptions& options) {
  return rooted("gather", true, recv, send, options.root, options.timeout);
}

std::shared_ptr<Work> NcclCommunicator::scatter(const Buffer& send, const Buffer& recv, const ScatterOptions& options) {
  return rooted("scatter", false, send, recv, options.root, options.timeout);
}

std::shared_ptr<Work> NcclCommunicator::rooted(const std::string& op, bool to_root, const Buffer& whole,
                                               const Buffer& part, int root, Milliseconds timeout) {
  checkNcclBuffer(whole, device_, op, to_root ? "recv buffer" : "send buffer");
  checkNcclBuffer(part, device_, op, to_root ? "send buffer" : "recv buffer");
  checkSameDType(whole, part, op);
  checkRoot(op, root);
  if (rank_ == root) {
    checkCount(whole.count, static_cast<size_t>(size_) * part.count, op,
               to_root ? "recv.count == size() * send.count" : "send.count == size() * recv.count");
  }
  const ncclDataType_t dtype = toNcclDataType(part.dtype);
  return launch(op, true, "", commonStream(whole, part, op), timeout, [&](cudaStream_t stream, auto deadline) {
    comm_->issue("ncclSend/ncclRecv (" + op + ")", [&](ncclComm_t comm) {
      std::vector<P2pCall> calls;
      for (int r = 0; r < size_; ++r) {
        if (rank_ == root && r != root) {
          calls.push_back({!to_root, static_cast<char*>(whole.data) + r * part.bytes(), part.count, dtype, r});
        }
      }
      if (rank_ != root) calls.push_back({to_root, part.data, part.count, dtype, root});
      return runGroup(calls, comm, stream);
    }, deadline);
    char* own = static_cast<char*>(whole.data) + rank_ * part.bytes();
    if (rank_ == root && own != part.data && part.count > 0) {
      DTRAIN_CUDA_CHECK(cudaMemcpyAsync(to_root ? own : part.data, to_root ? part.data : own, part.bytes(),
                                        cudaMemcpyDeviceToDevice, stream));
    }
  });
}

std::shared_ptr<Work> NcclCommunicator::alltoall(const Buffer& send, const Buffer& recv,
                                                 const AlltoallOptions& options) {
  const std::string op = "alltoall";
  checkNcclBuffer(send, device_, op, "send buffer");
  checkNcclBuffer(recv, device_, op, "recv buffer");
  checkSameDType(send, recv, op);
  checkCount(recv.count, send.count, op, "recv.count == send.count");
  if (send.count % static_cast<size_t>(size_) != 0) {
    throw ConfigError("nccl alltoall: send has " + std::to_string(send.count) + " elements; expected a multiple of " +
                      std::to_string(size_) + " (one equal part per rank)");
  }
  const ncclDataType_t dtype = toNcclDataType(send.dtype);
  const size_t part = send.count / static_cast<size_t>(size_), part_bytes = send.bytes() / static_cast<size_t>(size_);
  return launch(op, true, "", commonStream(send, recv, op), options.timeout, [&](cudaStream_t stream, auto deadline) {
    comm_->issue("ncclSend/ncclRecv (alltoall)", [&](ncclComm_t comm) {
      std::vector<P2pCall> calls;
      for (int r = 0; r < size_; ++r) {
        calls.push_back({true, static_cast<char*>(send.data) + r * part_bytes, part, dtype, r});
        calls.push_back({false, static_cast<char*>(recv.data) + r * part_bytes, part, dtype, r});
      }
      return runGroup(calls, comm, stream);
    }, deadline);
  });
}

void NcclCommunicator::checkRoot(const std::string& op, int root) const {
  if (root < 0 || root >= size_) {
    throw ConfigError("nccl " + op + ": root " + std::to_string(root) + " is not a rank of this group of " +
                      std::to_string(size_));
  }
}

std::shared_ptr<Work> NcclCommunicator::barrier(const BarrierOptions& options) {
  // A one-word max-allreduce of a word that stays 0: every rank must arrive
  // before any finishes. wait() on the Work is the host-side barrier.
  void* word = barrier_word_->get();
  return launch("barrier", true, "", nullptr, options.timeout, [&](cudaStream_t stream, auto deadline) {
    comm_->issue("ncclAllReduce (barrier)", [&](ncclComm_t comm) {
      return ncclAllReduce(word, word, 1, ncclInt32, ncclMax, comm, stream);
    }, deadline);
  });
}

std::shared_ptr<Work> NcclCommunicator::send(const Buffer& buffer, int peer, const SendRecvOptions& options) {
  return sendOrRecv(true, buffer, peer, options);
}

std::shared_ptr<Work> NcclCommunicator::recv(const Buffer& buffer, int peer, const SendRecvOptions& options) {
  return sendOrRecv(false, buffer, peer, options);
}

void NcclCommunicator::checkPeer(const std::string& op, int peer, const SendRecvOptions& options) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw ConfigError("nccl " + op + ": peer " + std::to_string(peer) + " is not another rank of this group of " +
                      std::to_string(size_) + " (this is rank " + std::to_string(rank_) + ")");
  }
  if (options.tag != 0) {
    throw ConfigError("nccl does not support send/recv tags (got tag " + std::to_string(options.tag) +
                      "): NCCL matches a send and a recv by their order between two ranks; use tag 0");
  }
}

std::shared_ptr<Work> NcclCommunicator::sendRecv(const Buffer& send, int send_peer, const Buffer& recv, int recv_peer,
                                                 const SendRecvOptions& options) {
  const std::string op = "sendrecv";
  checkNcclBuffer(send, device_, op, "send buffer");
  checkNcclBuffer(recv, device_, op, "recv buffer");
  checkPeer(op, send_peer, options);
  checkPeer(op, recv_peer, options);
  const ncclDataType_t send_type = toNcclDataType(send.dtype), recv_type = toNcclDataType(recv.dtype);
  const std::string peer_note = "to rank " + std::to_string(send_peer) + ", from rank " + std::to_string(recv_peer);
  return launch(op, false, peer_note, commonStream(send, recv, op), options.timeout,
                [&](cudaStream_t stream, auto deadline) {
                  comm_->issue("ncclSend/ncclRecv", [&](ncclComm_t comm) {
                    // One group: neither side's send waits for the other's recv.
                    return runGroup({{true, send.data, send.count, send_type, send_peer},
                                     {false, recv.data, recv.count, recv_type, recv_peer}},
                                    comm, stream);
                  }, deadline);
                });
}

std::shared_ptr<Work> NcclCommunicator::sendOrRecv(bool is_send, const Buffer& buffer, int peer,
                                                   const SendRecvOptions& options) {
  const std::string op = is_send ? "send" : "recv";
  checkNcclBuffer(buffer, device_, op, "buffer");
  checkPeer(op, peer, options);
  const ncclDataType_t dtype = toNcclDataType(buffer.dtype);
  const std::string peer_note = (is_send ? "to rank " : "from rank ") + std::to_string(peer);
  return launch(op, false, peer_note, buffer.stream, options.timeout, [&](cudaStream_t stream, auto deadline) {
    comm_->issue(is_send ? "ncclSend" : "ncclRecv", [&](ncclComm_t comm) {
      // A group of one: ncclGroupEnd is where a non-blocking communicator reports progress.
      return runGroup({{is_send, buffer.data, buffer.count, dtype, peer}}, comm, stream);
    }, deadline);
  });
}

std::unique_ptr<Communicator> createNcclCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                     const CommunicatorOptions& options) {
  return std::make_unique<NcclCommunicator>(std::move(store), rank, size, options);
}

}  // namespace dtrain

// The entry point dtrain_comm finds with dlsym (comm/communicator.cc);
// exceptions (ConfigError, TimeoutError, ...) pass through to the caller.
extern "C" dtrain::Communicator* dtrain_nccl_create_communicator(std::shared_ptr<dtrain::Store>* store, int rank,
                                                                 int size,
                                                                 const dtrain::CommunicatorOptions* options) {
  return new dtrain::NcclCommunicator(std::move(*store), rank, size, *options);
}
