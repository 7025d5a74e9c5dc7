// `dtrain bench allreduce|allgather|reduce_scatter|broadcast|sendrecv|alltoall|reduce|gather|scatter`: nccl-tests'
// measurement over dtrain's Communicator.
//
// For each size from min_bytes to max_bytes (times `factor`, or plus `step`),
// out-of-place then in-place: `warmup` untimed ops, a barrier, then `iters`
// ops timed back to back and waited on together; time = elapsed / iters,
// combined over ranks as nccl-tests' -a says (rank 0's, average, min or max).
// nccl-tests' -z: `blocking` 1 waits for each op and then holds a barrier, 2
// only waits, 3 waits and holds a barrier but times the ops alone. nccl-tests'
// -G: with `graph_launches` > 0 the `iters` ops are captured into one CUDA
// graph that is launched that many times; time = elapsed / (iters * launches).
// algbw = size / time; busbw = algbw * the nccl-tests factor:
// allreduce 2(n-1)/n, allgather and reduce_scatter (n-1)/n, broadcast 1,
// sendrecv and reduce 1, alltoall, gather and scatter (n-1)/n (as
// nccl-tests: sizes and in-place layouts as there; reduce and gather check
// root's result only). sendrecv is nccl-tests' sendrecv_perf: every rank sends its
// buffer to rank + 1 and receives rank - 1's in one call (a ring shift, at
// least 2 ranks); in place the send and the receive share one buffer, as
// there, and the data is not checked (the two race).
// With `check`, each size is also run once on patterned data and every
// element compared with a host reference; #wrong sums over ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/types.h"

namespace dtrain {
class Communicator;
class Store;
}

namespace dtrain::bench {

enum class Collective { kAllreduce, kAllgather, kReduceScatter, kBroadcast, kSendRecv, kAlltoall, kReduce, kGather, kScatter };
// reduce, gather, scatter and broadcast have a root.
bool hasRoot(Collective collective);
const char* collectiveName(Collective collective);
// allreduce and reduce_scatter take a reduce op; the others do not.
bool isReducing(Collective collective);
double busBandwidthFactor(Collective collective, int ranks);

// How one time is made of the ranks' times (nccl-tests' -a 0..3).
enum class RankTime { kRank0 = 0, kAverage = 1, kMin = 2, kMax = 3 };
const char* rankTimeName(RankTime how);  // "rank 0", "average", "min", "max"
// `times` holds rank r's time at index r; empty gives 0.
double combineRankTimes(const std::vector<double>& times, RankTime how);

struct CollectiveBenchOptions {
  Collective collective = Collective::kAllreduce;
  uint64_t min_bytes = 32u << 20;
  uint64_t max_bytes = 32u << 20;
  uint64_t factor = 2;  // geometric steps
  uint64_t step = 0;    // arithmetic steps when > 0
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  RankTime rank_time = RankTime::kAverage;
  int blocking = 0;        // nccl-tests -z: 0, 1 wait + barrier, 2 wait, 3 wait + barrier (untimed)
  int graph_launches = 0;  // nccl-tests -G: 0 = no CUDA graph
  Device device = Device::cpu();
  Milliseconds timeout{std::chrono::minutes(5)};
};

// The two columns of a row, as nccl-tests prints them.
inline constexpr int kOutOfPlace = 0;
inline constexpr int kInPlace = 1;

struct CollectiveBenchRow {
  uint64_t bytes = 0;
  uint64_t count = 0;
  double time_us[2] = {0, 0};  // [kOutOfPlace], [kInPlace]
  double algbw[2] = {0, 0};
  double busbw[2] = {0, 0};
  int64_t wrong[2] = {-1, -1};  // -1: not checked
};

// The sizes a run covers, each rounded down to whole elements divisible by
// the rank count where the collective needs it (as nccl-tests does).
std::vector<uint64_t> benchSizes(const CollectiveBenchOptions& options, int ranks);

// Runs the benchmark on every rank. Rank 0's rows hold times combined over
// ranks (options.rank_time) and #wrong summed over ranks (exchanged through
// `store`); the other ranks' rows hold their own numbers. `on_row`, when set, is called with each
// row as soon as its size is measured (so a long sweep reports as it goes).
using RowCallback = std::function<void(const CollectiveBenchRow& row)>;
std::vector<CollectiveBenchRow> runCollectiveBench(Communicator& comm, Store& store,
                                                   const CollectiveBenchOptions& options,
                                                   const RowCallback& on_row = {});

}  // namespace dtrain::bench
