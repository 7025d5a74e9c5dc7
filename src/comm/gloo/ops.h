// The collectives of the Gloo backend, one blocking function each, over a
// connected Gloo context. GlooCommunicator validates the arguments (sizes,
// dtypes, ranks, CPU memory) and runs these on its worker thread; Gloo
// failures escape as gloo::Exception (IoException on a dead peer or a
// timeout).
//
// Buffers follow communicator.h: allreduce send/recv have `count` elements;
// allgather recv has size*send.count; reduce_scatter send has size*recv.count.
// `tag` keeps the slots of different operations apart (the sequence number).
#pragma once

#include <cstdint>
#include <memory>

#include "comm/types.h"

namespace gloo {
class Context;
}

namespace dtrain::gloo_ops {

using ContextPtr = std::shared_ptr<gloo::Context>;

void allreduce(const ContextPtr& context, const Buffer& send, const Buffer& recv, ReduceOp op,
               Milliseconds timeout, uint32_t tag);
void broadcast(const ContextPtr& context, const Buffer& buffer, int root, Milliseconds timeout,
               uint32_t tag);
void allgather(const ContextPtr& context, const Buffer& send, const Buffer& recv,
               Milliseconds timeout, uint32_t tag);
void reduceScatter(const ContextPtr& context, const Buffer& send, const Buffer& recv, ReduceOp op,
                   Milliseconds timeout, uint32_t tag);
void barrier(const ContextPtr& context, Milliseconds timeout, uint32_t tag);
// Point to point: a send completes once the peer posted the matching recv
// (same tag) and the bytes left this process.
void send(const ContextPtr& context, const Buffer& buffer, int peer, uint32_t tag,
          Milliseconds timeout);
void recv(const ContextPtr& context, const Buffer& buffer, int peer, uint32_t tag,
          Milliseconds timeout);
void reduce(const ContextPtr& context, const Buffer& send, const Buffer& recv, ReduceOp op, int root,
            Milliseconds timeout, uint32_t tag);
void gather(const ContextPtr& context, const Buffer& send, const Buffer& recv, int root, Milliseconds timeout,
            uint32_t tag);
void scatter(const ContextPtr& context, const Buffer& send, const Buffer& recv, int root, Milliseconds timeout,
             uint32_t tag);
void alltoall(const ContextPtr& context, const Buffer& send, const Buffer& recv, Milliseconds timeout, uint32_t tag);
// send to send_peer and recv from recv_peer, both posted before either is waited for.
void sendRecv(const ContextPtr& context, const Buffer& send, int send_peer, const Buffer& recv, int recv_peer,
              uint32_t tag, Milliseconds timeout);

// True when the two buffers share at least one byte.
bool buffersOverlap(const Buffer& a, const Buffer& b);

}  // namespace dtrain::gloo_ops
