#include "comm/gloo/ops.h"

#include <cstring>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "comm/communicator.h"
#include "comm/reduce.h"
#include "common/error.h"

namespace dtrain::gloo_ops {
namespace {

// Gloo sizes elements by a C++ type; the arithmetic is ours (the reduce
// function), so any type of the right width will do.
template <typename F>
void withElementOfSize(DType dtype, F&& body) {
  switch (dtypeSize(dtype)) {
    case 1: return body(uint8_t{});
    case 2: return body(uint16_t{});
    case 4: return body(uint32_t{});
    case 8: return body(uint64_t{});
  }
  throw ConfigError(std::string("gloo: no element type of the size of ") + dtypeName(dtype));
}

// Point-to-point slots use a prefix Gloo's own collectives (0x01..0x08)
// never use, so a user tag cannot collide with a collective's slots.
constexpr uint8_t kPointToPointSlotPrefix = 0x70;

// send's bytes, or a copy of them in `staged` when they overlap recv (the
// collective would overwrite them before it has sent them all).
void* inputOf(const Buffer& send, const Buffer& recv, std::vector<char>& staged) {
  if (!buffersOverlap(send, recv)) return send.data;
  staged.assign(static_cast<const char*>(send.data), static_cast<const char*>(send.data) + send.bytes());
  return staged.data();
}

// Reduces `send` (or `recv` itself, in place) into `recv` over all ranks;
// avg leaves the sum for the caller to divide.
void allreduceSum(const ContextPtr& context, const void* send, void* recv, size_t count,
                  DType dtype, ReduceOp op, Milliseconds timeout, uint32_t tag) {
  withElementOfSize(dtype, [&](auto element) {
    using T = decltype(element);
    gloo::AllreduceOptions options(context);
    if (send != recv) options.setInput(static_cast<T*>(const_cast<void*>(send)), count);
    options.setOutput(static_cast<T*>(recv), count);
    options.setReduceFunction([dtype, op](void* out, const void* a, const void* b, size_t n) {
      reduceElements(out, a, b, n, dtype, op);
    });
    options.setTag(tag);
    options.setTimeout(timeout);
    gloo::allreduce(options);
  });
}

}  // namespace

void allreduce(const ContextPtr& context, const Buffer& send, const Buffer& recv, ReduceOp op,
               Milliseconds timeout, uint32_t tag) {
  if (recv.count == 0) return;
  if (context->size == 1) {
    // Gloo's ring needs a peer; with one rank every reduction is a copy.
    if (send.data != recv.data) std::memmove(recv.data, send.data, recv.bytes());
    return;
  }
  allreduceSum(context, send.data, recv.data, recv.count, recv.dtype, op, timeout, tag);
  if (op == ReduceOp::kAvg) divideInPlace(recv.data, recv.count, recv.dtype, context->size);
}

void broadcast(const ContextPtr& context, const Buffer& buffer, int root, Milliseconds timeout,
               uint32_t tag) {
  if (buffer.count == 0 || context->size == 1) return;
  withElementOfSize(buffer.dtype, [&](auto element) {
    using T = decltype(element);
    gloo::BroadcastOptions options(context);
    options.setOutput(static_cast<T*>(buffer.data), buffer.count);
    options.setRoot(root);
    options.setTag(tag);
    options.setTimeout(timeout);
    gloo::broadcast(options);
  });
}

void allgather(const ContextPtr& context, const Buffer& send, const Buffer& recv,
               Milliseconds timeout, uint32_t tag) {
  if (send.count == 0) return;
  char* own_slot = static_cast<char*>(recv.data) + context->rank * send.bytes();
  // In place (NCCL's definition): the input already sits in this rank's slot.
  const bool in_place = send.data == own_slot;
  // Any other overlap would be clobbered while gathering: gather from a copy.
  std::vector<char> staged;
  const void* input = send.data;
  if (!in_place && buffersOverlap(send, recv)) {
    staged.assign(static_cast<const char*>(send.data), static_cast<const char*>(send.data) + send.bytes());
    input = staged.data();
  }
  if (context->size == 1) {
    if (!in_place) std::memcpy(own_slot, input, send.bytes());
    return;
  }
  withElementOfSize(send.dtype, [&](auto element) {
    using T = decltype(element);
    gloo::AllgatherOptions options(context);
    if (!in_place) options.setInput(static_cast<T*>(const_cast<void*>(input)), send.count);
    options.setOutput(static_cast<T*>(recv.data), recv.count);
    options.setTag(tag);
    options.setTimeout(timeout);
    gloo::allgather(options);
  });
}

void reduceScatter(const ContextPtr& context, const Buffer& send, const Buffer& recv, ReduceOp op,
                   Milliseconds timeout, uint32_t tag) {
  if (recv.count == 0) return;
  // Gloo 0.5 has no reduce-scatter over unbound buffers, so this is an
  // allreduce of the whole send buffer into scratch memory, of which this
  // rank keeps its chunk: (size-1)/size more bytes on the wire than a true
  // reduce-scatter, which the CPU backend can afford. The scratch buffer
  // also makes in place (recv inside send) safe.
  std::vector<char> reduced(send.bytes());
  if (context->size == 1) {
    std::memcpy(reduced.data(), send.data, send.bytes());
  } else {
    allreduceSum(context, send.data, reduced.data(), send.count, send.dtype, op, timeout, tag);
  }
  std::memmove(recv.data, reduced.data() + context->rank * recv.bytes(), recv.bytes());
  if (op == ReduceOp::kAvg) divideInPlace(recv.data, recv.count, recv.dtype, context->size);
}

void reduce(const ContextPtr& context, const Buffer& send, const Buffer& recv, ReduceOp op, int root,
            Milliseconds timeout, uint32_t tag) {
  if (send.count == 0) return;
  if (context->size == 1) {
    if (send.data != recv.data) std::memmove(recv.data, send.data, send.bytes());
    return;
  }
  // Gloo accumulates in every rank's output: a rank that gave no recv of
  // the size reduces through scratch memory.
  std::vector<char> scratch;
  void* out = recv.data;
  if (context->rank != root && recv.count != send.count) {
    scratch.resize(send.bytes());
    out = scratch.data();
  }
  withElementOfSize(send.dtype, [&](auto element) {
    using T = decltype(element);
    gloo::ReduceOptions options(context);
    if (send.data != out) options.setInput(static_cast<T*>(send.data), send.count);
    options.setOutput(static_cast<T*>(out), send.count);
    options.setRoot(root);
    const DType dtype = send.dtype;
    const ReduceOp sum = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
    options.setReduceFunction([dtype, sum](void* o, const void* a, const void* b, size_t n) {
      reduceElements(o, a, b, n, dtype, sum);
    });
    options.setTag(tag);
    options.setTimeout(timeout);
    gloo::reduce(options);
  });
  if (op == ReduceOp::kAvg && context->rank == root) divideInPlace(recv.data, recv.count, recv.dtype, context->size);
}

void gather(const ContextPtr& context, const Buffer& send, const Buffer& recv, int root, Milliseconds timeout,
            uint32_t tag) {
  if (send.count == 0) return;
  std::vector<char> staged;  // an input inside root's output is gathered from a copy
  void* input = context->rank == root ? inputOf(send, recv, staged) : send.data;
  if (context->size == 1) {
    std::memmove(recv.data, input, send.bytes());
    return;
  }
  withElementOfSize(send.dtype, [&](auto element) {
    using T = decltype(element);
    gloo::GatherOptions options(context);
    options.setInput(static_cast<T*>(input), send.count);
    if (context->rank == root) options.setOutput(static_cast<T*>(recv.data), recv.count);
    options.setRoot(root);
    options.setTag(tag);
    options.setTimeout(timeout);
    gloo::gather(options);
  });
}

void scatter(const ContextPtr& context, const Buffer& send, const Buffer& recv, int root, Milliseconds timeout,
             uint32_t tag) {
  if (recv.count == 0) return;
  std::vector<char> staged;  // an output inside root's input is scattered from a copy
  char* input = static_cast<char*>(context->rank == root ? inputOf(send, recv, staged) : send.data);
  if (context->size == 1) {
    std::memmove(recv.data, input, recv.bytes());
    return;
  }
  withElementOfSize(recv.dtype, [&](auto element) {
    using T = decltype(element);
    gloo::ScatterOptions options(context);
    if (context->rank == root) {
      std::vector<T*> parts;
      for (int r = 0; r < context->size; ++r) parts.push_back(reinterpret_cast<T*>(input + r * recv.bytes()));
      options.setInputs(parts, recv.count);
    }
    options.setOutput(static_cast<T*>(recv.data), recv.count);
    options.setRoot(root);
    options.setTag(tag);
    options.setTimeout(timeout);
    gloo::scatter(options);
  });
}

void alltoall(const ContextPtr& context, const Buffer& send, const Buffer& recv, Milliseconds timeout, uint32_t tag) {
  if (send.count == 0) return;
  std::vector<char> staged;  // in place: the input is read from a copy
  void* input = inputOf(send, recv, staged);
  if (context->size == 1) {
    std::memmove(recv.data, input, send.bytes());
    return;
  }
  withElementOfSize(send.dtype, [&](auto element) {
    using T = decltype(element);
    gloo::AlltoallOptions options(context);
    options.setInput(static_cast<T*>(input), send.count);
    options.setOutput(static_cast<T*>(recv.data), recv.count);
    options.setTag(tag);
    options.setTimeout(timeout);
    gloo::alltoall(options);
  });
}

void barrier(const ContextPtr& context, Milliseconds timeout, uint32_t tag) {
  if (context->size == 1) return;
  gloo::BarrierOptions options(context);
  options.setTag(tag);
  options.setTimeout(timeout);
  gloo::barrier(options);
}

bool buffersOverlap(const Buffer& a, const Buffer& b) {
  const auto a_begin = reinterpret_cast<uintptr_t>(a.data);
  const auto b_begin = reinterpret_cast<uintptr_t>(b.data);
  return a_begin < b_begin + b.bytes() && b_begin < a_begin + a.bytes();
}

void send(const ContextPtr& context, const Buffer& buffer, int peer, uint32_t tag,
          Milliseconds timeout) {
  if (buffer.count == 0) return;
  auto unbound = context->createUnboundBuffer(buffer.data, buffer.bytes());
  unbound->send(peer, gloo::Slot::build(kPointToPointSlotPrefix, tag));
  if (!unbound->waitSend(timeout)) {
    throw CommError("send to rank " + std::to_string(peer) + " was aborted");
  }
}

void recv(const ContextPtr& context, const Buffer& buffer, int peer, uint32_t tag,
          Milliseconds timeout) {
  if (buffer.count == 0) return;
  auto unbound = context->createUnboundBuffer(buffer.data, buffer.bytes());
  unbound->recv(peer, gloo::Slot::build(kPointToPointSlotPrefix, tag));
  if (!unbound->waitRecv(timeout)) {
    throw CommError("recv from rank " + std::to_string(peer) + " was aborted");
  }
}

void sendRecv(const ContextPtr& context, const Buffer& send, int send_peer, const Buffer& recv, int recv_peer,
              uint32_t tag, Milliseconds timeout) {
  // Both posted before either is waited for: the peer may be doing the same.
  std::unique_ptr<gloo::transport::UnboundBuffer> out, in;
  if (send.count > 0) {
    out = context->createUnboundBuffer(send.data, send.bytes());
    out->send(send_peer, gloo::Slot::build(kPointToPointSlotPrefix, tag));
  }
  if (recv.count > 0) {
    in = context->createUnboundBuffer(recv.data, recv.bytes());
    in->recv(recv_peer, gloo::Slot::build(kPointToPointSlotPrefix, tag));
  }
  if (in && !in->waitRecv(timeout)) throw CommError("recv from rank " + std::to_string(recv_peer) + " was aborted");
  if (out && !out->waitSend(timeout)) throw CommError("send to rank " + std::to_string(send_peer) + " was aborted");
}

}  // namespace dtrain::gloo_ops
