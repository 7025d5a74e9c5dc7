#include "comm/gloo/communicator.h"

#include <cstdint>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>

#include "comm/bootstrap.h"
#include "comm/gloo/device.h"
#include "comm/gloo/op_queue.h"
#include "comm/gloo/ops.h"
#include "comm/gloo/store_adapter.h"
#include "comm/progress_tracker.h"
#include "common/error.h"
#include "common/host.h"
#include "common/log.h"
#include "store/prefix_store.h"

namespace dtrain {
namespace {

std::string elements(size_t count) { return std::to_string(count) + " elements"; }

void checkCpuBuffer(const std::string& op, const char* role, const Buffer& buffer) {
  if (buffer.device.type == DeviceType::kCuda) {
    throw ConfigError("gloo does not support CUDA buffers; use the nccl backend (gloo " + op + " " +
                      role + " is on cuda:" + std::to_string(buffer.device.index) + ")");
  }
  if (buffer.data == nullptr && buffer.count > 0) {
    throw ConfigError("gloo " + op + " " + role + " has " + elements(buffer.count) +
                      " but a null data pointer");
  }
}

void checkPair(const std::string& op, const Buffer& send, const Buffer& recv) {
  checkCpuBuffer(op, "send buffer", send);
  checkCpuBuffer(op, "recv buffer", recv);
  if (send.dtype != recv.dtype) {
    throw ConfigError("gloo " + op + ": send is " + dtypeName(send.dtype) + " but recv is " +
                      dtypeName(recv.dtype) + "; expected the same dtype");
  }
}

void checkCount(const std::string& op, const char* role, size_t actual, size_t expected,
                const std::string& why) {
  if (actual != expected) {
    throw ConfigError("gloo " + op + ": " + role + " has " + elements(actual) + "; expected " +
                      elements(expected) + " (" + why + ")");
  }
}

void checkRank(const std::string& op, const char* role, int value, int size) {
  if (value < 0 || value >= size) {
    throw ConfigError("gloo " + op + ": " + role + " " + std::to_string(value) +
                      " is out of range; expected 0.." + std::to_string(size - 1));
  }
}

}  // namespace

GlooCommunicator::GlooCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                   const CommunicatorOptions& options)
    : rank_(rank), size_(size) {
  // Every thread started below (progress, Gloo's device loop, the worker)
  // inherits the blocked SIGPIPE.
  ScopedSigpipeBlock sigpipe_block;
  auto group_store = std::make_shared<PrefixStore>(options.store_prefix, std::move(store));
  checkGroupConsistency(*group_store, rank, size, options.init_timeout);
  const GlooDeviceChoice choice = chooseGlooDevice();
  // Where this rank runs, for peers' diagnoses: the address Gloo listens on.
  progress_ = std::make_unique<ProgressTracker>(group_store, "", rank, size, options.progress_interval,
                                                hostName(), choice.hostname.empty() ? choice.iface : choice.hostname);

  auto device = createGlooDevice(choice);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(options.init_timeout);
  GlooStoreAdapter adapter(std::make_shared<PrefixStore>("gloo", group_store), options.init_timeout);
  try {
    context->connectFullMesh(adapter, device);
  } catch (const gloo::Exception& e) {
    throw CommError("gloo rank " + std::to_string(rank) + " could not connect to its peers from " +
                    choice.describe() + ": " + e.what());
  }
  context_ = std::move(context);
  queue_ = std::make_unique<OpQueue>(currentRank());
  DTRAIN_LOG_DEBUG("gloo communicator ready: rank " << rank << " of " << size << " on "
                   << choice.describe() << ", store prefix " << options.store_prefix);
}

GlooCommunicator::~GlooCommunicator() {
  queue_.reset();  // finish queued work while the context and tracker still exist
  context_.reset();
}

std::shared_ptr<Work> GlooCommunicator::submit(const std::string& op_name, Operation operation) {
  // Numbering and queueing together keep the queue in sequence order even
  // when several threads submit.
  std::lock_guard<std::mutex> lock(submit_mutex_);
  auto work = std::make_shared<Work>(op_name, ++last_seq_);
  queue_->push([this, work, operation = std::move(operation)] { execute(*work, operation); });
  return work;
}

void GlooCommunicator::execute(Work& work, const Operation& operation) {
  const std::string what = "gloo " + work.opName() + " #" + std::to_string(work.seq());
  if (!broken_reason_.empty()) {
    work.markFailed(std::make_exception_ptr(
        CommError(what + " was not run: the communicator is broken by an earlier failure: " +
                  broken_reason_)));
    return;
  }
  progress_->started(work.seq());
  try {
    // Sequence numbers agree across ranks, so they make good slot tags.
    operation(context_, static_cast<uint32_t>(work.seq()));
    progress_->completed(work.seq());
    work.markCompleted();
    return;
  } catch (const Error& e) {
    broken_reason_ = what + " failed: " + e.message();
  } catch (const std::exception& e) {
    broken_reason_ = what + " failed: " + e.what();  // Gloo's, with its source location
  }
  // Closing this rank's connections first lets peers blocked on it fail now
  // rather than at their timeout; the diagnosis below takes a few intervals.
  context_.reset();
  const std::string diagnosis = progress_->diagnose(work.seq(), work.opName());
  if (!diagnosis.empty()) broken_reason_ += "; " + diagnosis;
  DTRAIN_LOG_ERROR(broken_reason_);
  work.markFailed(std::make_exception_ptr(CommError(broken_reason_)));
}

std::shared_ptr<Work> GlooCommunicator::allreduce(const Buffer& send, const Buffer& recv,
                                                  const AllreduceOptions& options) {
  checkPair("allreduce", send, recv);
  checkCount("allreduce", "recv", recv.count, send.count, "send.count");
  if (send.data != recv.data && gloo_ops::buffersOverlap(send, recv)) {
    throw ConfigError("gloo allreduce: send and recv overlap without being the same buffer; "
                      "expected in place (send.data == recv.data) or disjoint buffers");
  }
  return submit("allreduce", [send, recv, options](const auto& context, uint32_t tag) {
    gloo_ops::allreduce(context, send, recv, options.op, options.timeout, tag);
  });
}

std::shared_ptr<Work> GlooCommunicator::broadcast(const Buffer& buffer, const BroadcastOptions& options) {
  checkCpuBuffer("broadcast", "buffer", buffer);
  checkRank("broadcast", "root", options.root, size_);
  return submit("broadcast", [buffer, options](const auto& context, uint32_t tag) {
    gloo_ops::broadcast(context, buffer, options.root, options.timeout, tag);
  });
}

std::shared_ptr<Work> GlooCommunicator::allgather(const Buffer& send, const Buffer& recv,
                                                  const AllgatherOptions& options) {
  checkPair("allgather", send, recv);
  checkCount("allgather", "recv", recv.count, send.count * size_, "size() * send.count");
  return submit("allgather", [send, recv, options](const auto& context, uint32_t tag) {
    gloo_ops::allgather(context, send, recv, options.timeout, tag);
  });
}

std::shared_ptr<Work> GlooCommunicator::reduceScatter(const Buffer& send, const Buffer& recv,
                                                      const ReduceScatterOptions& options) {
  checkPair("reduce_scatter", send, recv);
  checkCount("reduce_scatter", "send", send.count, recv.count * size_, "size() * recv.count");
  return submit("reduce_scatter", [send, recv, options](const auto& context, uint32_t tag) {
    gloo_ops::reduceScatter(context, send, recv, options.op, options.timeout, tag);
  });
}

std::shared_ptr<Work> GlooCommunicator::barrier(const BarrierOptions& options) {
  return submit("barrier", [options](const auto& context, uint32_t tag) {
    gloo_ops::barrier(context, options.timeout, tag);
  });
}

std::shared_ptr<Work> GlooCommunicator::send(const Buffer& buffer, int peer, const SendRecvOptions& options) {
  checkCpuBuffer("send", "buffer", buffer);
  checkRank("send", "peer", peer, size_);
  if (peer == rank_) throw ConfigError("gloo send: peer " + std::to_string(peer) + " is this rank");
  return submit("send", [buffer, peer, options](const auto& context, uint32_t) {
    gloo_ops::send(context, buffer, peer, options.tag, options.timeout);
  });
}

std::shared_ptr<Work> GlooCommunicator::recv(const Buffer& buffer, int peer, const SendRecvOptions& options) {
  checkCpuBuffer("recv", "buffer", buffer);
  checkRank("recv", "peer", peer, size_);
  if (peer == rank_) throw ConfigError("gloo recv: peer " + std::to_string(peer) + " is this rank");
  return submit("recv", [buffer, peer, options](const auto& context, uint32_t) {
    gloo_ops::recv(context, buffer, peer, options.tag, options.timeout);
  });
}

std::shared_ptr<Work> GlooCommunicator::sendRecv(const Buffer& send, int send_peer, const Buffer& recv, int recv_peer,
                                                 const SendRecvOptions& options) {
  checkCpuBuffer("sendrecv", "send buffer", send);
  checkCpuBuffer("sendrecv", "recv buffer", recv);
  checkRank("sendrecv", "send peer", send_peer, size_);
  checkRank("sendrecv", "recv peer", recv_peer, size_);
  if (send_peer == rank_ || recv_peer == rank_) {
    throw ConfigError("gloo sendrecv: a peer (send " + std::to_string(send_peer) + ", recv " +
                      std::to_string(recv_peer) + ") is this rank");
  }
  return submit("sendrecv", [send, send_peer, recv, recv_peer, options](const auto& context, uint32_t) {
    gloo_ops::sendRecv(context, send, send_peer, recv, recv_peer, options.tag, options.timeout);
  });
}

std::shared_ptr<Work> GlooCommunicator::reduce(const Buffer& send, const Buffer& recv, const ReduceOptions& options) {
  checkPair("reduce", send, recv);
  checkRank("reduce", "root", options.root, size_);
  if (rank_ == options.root) checkCount("reduce", "recv", recv.count, send.count, "send.count");
  return submit("reduce", [send, recv, options](const auto& context, uint32_t tag) {
    gloo_ops::reduce(context, send, recv, options.op, options.root, options.timeout, tag);
  });
}

std::shared_ptr<Work> GlooCommunicator::gather(const Buffer& send, const Buffer& recv, const GatherOptions& options) {
  checkPair("gather", send, recv);
  checkRank("gather", "root", options.root, size_);
  if (rank_ == options.root) checkCount("gather", "recv", recv.count, send.count * size_, "size() * send.count");
  return submit("gather", [send, recv, options](const auto& context, uint32_t tag) {
    gloo_ops::gather(context, send, recv, options.root, options.timeout, tag);
  });
}

std::shared_ptr<Work> GlooCommunicator::scatter(const Buffer& send, const Buffer& recv, const ScatterOptions& options) {
  checkPair("scatter", send, recv);
  checkRank("scatter", "root", options.root, size_);
  if (rank_ == options.root) checkCount("scatter", "send", send.count, recv.count * size_, "size() * recv.count");
  return submit("scatter", [send, recv, options](const auto& context, uint32_t tag) {
    gloo_ops::scatter(context, send, recv, options.root, options.timeout, tag);
  });
}

std::shared_ptr<Work> GlooCommunicator::alltoall(const Buffer& send, const Buffer& recv,
                                                 const AlltoallOptions& options) {
  checkPair("alltoall", send, recv);
  checkCount("alltoall", "recv", recv.count, send.count, "send.count");
  if (send.count % static_cast<size_t>(size_) != 0) {
    throw ConfigError("gloo alltoall: send has " + std::to_string(send.count) + " elements; expected a multiple of " +
                      std::to_string(size_) + " (one equal part per rank)");
  }
  return submit("alltoall", [send, recv, options](const auto& context, uint32_t tag) {
    gloo_ops::alltoall(context, send, recv, options.timeout, tag);
  });
}

std::unique_ptr<Communicator> createGlooCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                     const CommunicatorOptions& options) {
  return std::make_unique<GlooCommunicator>(std::move(store), rank, size, options);
}

}  // namespace dtrain
