#include "bench/collective_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>

#include "bench/cuda_graph.h"
#include "bench/device_memory.h"
#include "comm/communicator.h"
#include "comm/dtype_values.h"
#include "common/error.h"
#include "store/store.h"

namespace dtrain::bench {
namespace {

// Small integers, so every dtype holds every partial result exactly and the
// reference does not depend on the order of reduction.
double patternValue(const CollectiveBenchOptions& o, int rank, size_t i) {
  if (!isReducing(o.collective)) return static_cast<double>((rank * 5 + i) % 13);
  switch (o.op) {
    case ReduceOp::kProd: return 1.0 + static_cast<double>((rank + i) % 2);
    case ReduceOp::kMin:
    case ReduceOp::kMax: return static_cast<double>((rank * 7 + i) % 16);
    default: return static_cast<double>((rank + i) % 4);
  }
}

std::vector<unsigned char> patterned(const CollectiveBenchOptions& o, int rank, size_t count,
                                     size_t offset = 0) {
  std::vector<unsigned char> host(count * dtypeSize(o.dtype));
  for (size_t i = 0; i < count; ++i) storeElement(host.data(), i, o.dtype, patternValue(o, rank, offset + i));
  return host;
}

// Element counts of one op at `bytes`: {send, recv}.
std::pair<size_t, size_t> elementCounts(Collective c, uint64_t bytes, DType dtype, int ranks) {
  size_t total = bytes / dtypeSize(dtype);
  switch (c) {
    case Collective::kAllgather:
    case Collective::kGather: return {total / ranks, total / ranks * ranks};
    case Collective::kReduceScatter:
    case Collective::kScatter: return {total / ranks * ranks, total / ranks};
    case Collective::kAlltoall: return {total / ranks * ranks, total / ranks * ranks};
    default: return {total, total};
  }
}

// The reference result of this rank, on the host.
std::vector<unsigned char> expectedResult(const CollectiveBenchOptions& o, int rank, int ranks,
                                          size_t send_count, size_t recv_count) {
  switch (o.collective) {
    case Collective::kBroadcast: return patterned(o, o.root, recv_count);
    case Collective::kSendRecv: return patterned(o, (rank + ranks - 1) % ranks, recv_count);
    case Collective::kScatter: return patterned(o, o.root, recv_count, rank * recv_count);
    case Collective::kAlltoall: {
      // Part r of every rank j's send, in rank order.
      const size_t part = recv_count / ranks;
      std::vector<unsigned char> out;
      for (int j = 0; j < ranks; ++j) {
        auto piece = patterned(o, j, part, rank * part);
        out.insert(out.end(), piece.begin(), piece.end());
      }
      return out;
    }
    case Collective::kGather:
    case Collective::kAllgather: {
      std::vector<unsigned char> out;
      for (int r = 0; r < ranks; ++r) {
        auto part = patterned(o, r, send_count);
        out.insert(out.end(), part.begin(), part.end());
      }
      return out;
    }
    default: {
      size_t offset = o.collective == Collective::kReduceScatter ? rank * recv_count : 0;
      auto acc = patterned(o, 0, recv_count, offset);
      ReduceOp op = o.op == ReduceOp::kAvg ? ReduceOp::kSum : o.op;
      for (int r = 1; r < ranks; ++r) {
        auto part = patterned(o, r, recv_count, offset);
        reduceInto(acc.data(), part.data(), recv_count, o.dtype, op);
      }
      if (o.op == ReduceOp::kAvg) divideInPlace(acc.data(), recv_count, o.dtype, ranks);
      return acc;
    }
  }
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return 1e-2;
    case DType::kBFloat16: return 5e-2;
    case DType::kFloat32: return 1e-5;
    case DType::kFloat64: return 1e-12;
    default: return 0;  // integers: exact
  }
}

int64_t countWrong(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want,
                   size_t count, DType dtype) {
  int64_t wrong = 0;
  double tol = tolerance(dtype);
  for (size_t i = 0; i < count; ++i) {
    double g = loadElement(got.data(), i, dtype);
    double w = loadElement(want.data(), i, dtype);
    if (!(std::fabs(g - w) <= tol * std::max(1.0, std::fabs(w)))) ++wrong;
  }
  return wrong;
}

struct Buffers {
  std::unique_ptr<DeviceMemory> send, recv;
  Buffer sendView, recvView;
};

// nccl-tests' in-place layouts: allgather sends from recv + rank*sendcount,
// reduce_scatter receives into send + rank*recvcount.
Buffers makeBuffers(const CollectiveBenchOptions& o, int rank, size_t send_count, size_t recv_count,
                    int place) {
  Buffers b;
  size_t elem = dtypeSize(o.dtype);
  size_t big = std::max(send_count, recv_count);
  b.recv = std::make_unique<DeviceMemory>(o.device, big * elem);
  b.recvView = Buffer{b.recv->data(), recv_count, o.dtype, o.device, nullptr};
  if (place == kInPlace || o.collective == Collective::kBroadcast) {
    b.sendView = b.recvView;
    b.sendView.count = send_count;
    char* base = static_cast<char*>(b.recv->data());
    if (o.collective == Collective::kAllgather || o.collective == Collective::kGather) {
      b.sendView.data = base + rank * send_count * elem;
    }
    if (o.collective == Collective::kReduceScatter || o.collective == Collective::kScatter) {
      b.recvView.data = base + rank * recv_count * elem;
    }
  } else {
    b.send = std::make_unique<DeviceMemory>(o.device, send_count * elem);
    b.sendView = Buffer{b.send->data(), send_count, o.dtype, o.device, nullptr};
  }
  return b;
}

std::shared_ptr<Work> launch(Communicator& comm, const CollectiveBenchOptions& o, const Buffer& send,
                             const Buffer& recv) {
  switch (o.collective) {
    case Collective::kAllreduce: return comm.allreduce(send, recv, {o.op, o.timeout});
    case Collective::kAllgather: return comm.allgather(send, recv, {o.timeout});
    case Collective::kReduceScatter: return comm.reduceScatter(send, recv, {o.op, o.timeout});
    case Collective::kBroadcast: return comm.broadcast(recv, {o.root, o.timeout});
    case Collective::kSendRecv: {
      const int n = comm.size(), rank = comm.rank();
      return comm.sendRecv(send, (rank + 1) % n, recv, (rank + n - 1) % n, {0, o.timeout});
    }
    case Collective::kAlltoall: return comm.alltoall(send, recv, {o.timeout});
    case Collective::kReduce: return comm.reduce(send, recv, {o.op, o.root, o.timeout});
    case Collective::kGather: return comm.gather(send, recv, {o.root, o.timeout});
    case Collective::kScatter: return comm.scatter(send, recv, {o.root, o.timeout});
  }
  return nullptr;
}

void runAndWait(Communicator& comm, const CollectiveBenchOptions& o, const Buffers& b, int n) {
  std::vector<std::shared_ptr<Work>> works;
  works.reserve(n);
  for (int i = 0; i < n; ++i) works.push_back(launch(comm, o, b.sendView, b.recvView));
  for (auto& w : works) w->wait(o.timeout);
}

void barrier(Communicator& comm, const CollectiveBenchOptions& o) { comm.barrier({o.timeout})->wait(o.timeout); }

double microsecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
}

// -G: the iterations captured into one graph, launched graph_launches times.
double timeGraphLaunches(Communicator& comm, const CollectiveBenchOptions& o, const Buffers& b) {
  GraphStream graph(o.device);
  Buffer send = b.sendView, recv = b.recvView;
  send.stream = recv.stream = graph.stream();
  graph.beginCapture();
  for (int i = 0; i < o.iters; ++i) launch(comm, o, send, recv);
  graph.endCapture();
  barrier(comm, o);
  auto start = std::chrono::steady_clock::now();
  graph.launch(o.graph_launches);
  graph.synchronize();
  return microsecondsSince(start) / (static_cast<double>(o.iters) * o.graph_launches);
}

// This rank's time of one operation, in microseconds, as -z and -G say.
double timeOperations(Communicator& comm, const CollectiveBenchOptions& o, const Buffers& b) {
  runAndWait(comm, o, b, o.warmup);
  barrier(comm, o);
  if (o.graph_launches > 0) return timeGraphLaunches(comm, o, b);
  auto start = std::chrono::steady_clock::now();
  if (o.blocking == 0) {
    runAndWait(comm, o, b, o.iters);
    synchronize(o.device);
    return microsecondsSince(start) / o.iters;
  }
  double operations_us = 0;  // -z 3 leaves the barriers out
  for (int i = 0; i < o.iters; ++i) {
    auto op_start = std::chrono::steady_clock::now();
    launch(comm, o, b.sendView, b.recvView)->wait(o.timeout);
    operations_us += microsecondsSince(op_start);
    if (o.blocking != 2) barrier(comm, o);
  }
  return (o.blocking == 3 ? operations_us : microsecondsSince(start)) / o.iters;
}

// Fills the send data (the whole in-place buffer for in-place layouts).
void fillInputs(const CollectiveBenchOptions& o, int rank, const Buffers& b, size_t send_count) {
  if (o.collective == Collective::kBroadcast) {
    auto host = rank == o.root ? patterned(o, rank, send_count)
                               : std::vector<unsigned char>(send_count * dtypeSize(o.dtype), 0xee);
    b.recv->upload(host);
    return;
  }
  if (b.send) {
    b.send->upload(patterned(o, rank, send_count, o.collective == Collective::kReduceScatter ? 0 : 0));
    b.recv->upload(std::vector<unsigned char>(b.recv->bytes(), 0xee));
    return;
  }
  // In place: the rank's input sits inside the recv buffer.
  std::vector<unsigned char> host(b.recv->bytes(), 0xee);
  auto input = patterned(o, rank, send_count);
  size_t offset = static_cast<char*>(b.sendView.data) - static_cast<char*>(b.recv->data());
  std::copy(input.begin(), input.end(), host.begin() + offset);
  b.recv->upload(host);
}

int64_t checkOnce(Communicator& comm, const CollectiveBenchOptions& o, const Buffers& b,
                  size_t send_count, size_t recv_count) {
  fillInputs(o, comm.rank(), b, send_count);
  runAndWait(comm, o, b, 1);
  synchronize(o.device);
  // reduce and gather write root's recv only.
  if ((o.collective == Collective::kReduce || o.collective == Collective::kGather) && comm.rank() != o.root) return 0;
  auto want = expectedResult(o, comm.rank(), comm.size(), send_count, recv_count);
  size_t offset = static_cast<char*>(b.recvView.data) - static_cast<char*>(b.recv->data());
  auto all = b.recv->download(offset + recv_count * dtypeSize(o.dtype));
  std::vector<unsigned char> got(all.begin() + offset, all.end());
  return countWrong(got, want, recv_count, o.dtype);
}

}  // namespace

bool isReducing(Collective c) {
  return c == Collective::kAllreduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}

bool hasRoot(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather || c == Collective::kScatter;
}

const char* collectiveName(Collective c) {
  switch (c) {
    case Collective::kAllreduce: return "allreduce";
    case Collective::kAllgather: return "allgather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kSendRecv: return "sendrecv";
    case Collective::kAlltoall: return "alltoall";
    case Collective::kReduce: return "reduce";
    case Collective::kGather: return "gather";
    case Collective::kScatter: return "scatter";
  }
  return "?";
}

const char* rankTimeName(RankTime how) {
  switch (how) {
    case RankTime::kRank0: return "rank 0";
    case RankTime::kAverage: return "average";
    case RankTime::kMin: return "min";
    case RankTime::kMax: return "max";
  }
  return "?";
}

double combineRankTimes(const std::vector<double>& times, RankTime how) {
  if (times.empty()) return 0.0;
  switch (how) {
    case RankTime::kRank0: return times.front();
    case RankTime::kMin: return *std::min_element(times.begin(), times.end());
    case RankTime::kMax: return *std::max_element(times.begin(), times.end());
    case RankTime::kAverage: break;
  }
  double sum = 0;
  for (double t : times) sum += t;
  return sum / static_cast<double>(times.size());
}

double busBandwidthFactor(Collective c, int n) {
  switch (c) {
    case Collective::kAllreduce: return n > 1 ? 2.0 * (n - 1) / n : 0.0;
    case Collective::kAllgather:
    case Collective::kReduceScatter:
    case Collective::kAlltoall:
    case Collective::kGather:
    case Collective::kScatter: return n > 1 ? static_cast<double>(n - 1) / n : 0.0;
    case Collective::kBroadcast:
    case Collective::kSendRecv:
    case Collective::kReduce: return 1.0;
  }
  return 1.0;
}

std::vector<uint64_t> benchSizes(const CollectiveBenchOptions& o, int ranks) {
  std::vector<uint64_t> sizes;
  size_t elem = dtypeSize(o.dtype);
  for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes;) {
    auto [send, recv] = elementCounts(o.collective, bytes, o.dtype, ranks);
    uint64_t rounded = std::max(send, recv) * elem;
    if (rounded > 0 && (sizes.empty() || sizes.back() != rounded)) sizes.push_back(rounded);
    uint64_t next = o.step > 0 ? bytes + o.step : bytes * o.factor;
    if (next <= bytes) break;
    bytes = next;
  }
  return sizes;
}

std::vector<CollectiveBenchRow> runCollectiveBench(Communicator& comm, Store& store,
                                                   const CollectiveBenchOptions& o, const RowCallback& on_row) {
  std::vector<CollectiveBenchRow> rows;
  const int n = comm.size();
  if (o.collective == Collective::kSendRecv && n < 2) {
    throw ConfigError("dtrain bench sendrecv: each rank sends to the next and receives from the previous; expected at "
                      "least 2 ranks, got " + std::to_string(n));
  }
  for (uint64_t bytes : benchSizes(o, n)) {
    auto [send_count, recv_count] = elementCounts(o.collective, bytes, o.dtype, n);
    CollectiveBenchRow row;
    row.bytes = bytes;
    row.count = std::max(send_count, recv_count);
    for (int place : {kOutOfPlace, kInPlace}) {
      Buffers b = makeBuffers(o, comm.rank(), send_count, recv_count, place);
      fillInputs(o, comm.rank(), b, send_count);
      double time_us = timeOperations(comm, o, b);
      // In place, sendrecv's send and receive share one buffer, and so do
      // NCCL's alltoall's: they race, as in nccl-tests (Gloo stages its
      // alltoall input and is checked).
      const bool racing = place == kInPlace && (o.collective == Collective::kSendRecv ||
                                                (o.collective == Collective::kAlltoall && o.device.type == DeviceType::kCuda));
      int64_t wrong = o.check && !racing ? checkOnce(comm, o, b, send_count, recv_count) : -1;

      // Combine the times (-a) and sum the errors over ranks, as nccl-tests does.
      std::string key = std::string("bench/") + collectiveName(o.collective) + "/" + dtypeName(o.dtype) + "/" +
                        reduceOpName(o.op) + "/" + std::to_string(bytes) + "/" + std::to_string(place) + "/";
      std::ostringstream mine;
      mine.precision(17);
      mine << time_us << " " << wrong;
      store.set(key + std::to_string(comm.rank()), mine.str());
      if (comm.rank() == 0) {
        std::vector<double> times(n, 0.0);
        int64_t sum_wrong = 0;
        for (int r = 0; r < n; ++r) {
          std::istringstream theirs(store.get(key + std::to_string(r)));
          int64_t w = 0;
          theirs >> times[r] >> w;
          sum_wrong += w;
        }
        time_us = combineRankTimes(times, o.rank_time);
        wrong = o.check ? sum_wrong : -1;
      }
      row.time_us[place] = time_us;
      row.algbw[place] = time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e3) : 0.0;
      row.busbw[place] = row.algbw[place] * busBandwidthFactor(o.collective, n);
      row.wrong[place] = wrong;
    }
    rows.push_back(row);
    if (on_row) on_row(row);
  }
  return rows;
}

}  // namespace dtrain::bench
