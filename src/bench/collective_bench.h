// `dtrain bench allreduce|allgather|reduce_scatter|broadcast`: nccl-tests'
// measurement and output over dtrain's Communicator.
//
// For each size from min_bytes to max_bytes (times `factor`, or plus `step`),
// out-of-place then in-place: `warmup` untimed ops, then `iters` ops timed
// back to back and waited on together; time = elapsed / iters, averaged over
// ranks. algbw = size / time; busbw = algbw * the nccl-tests factor:
// allreduce 2(n-1)/n, allgather and reduce_scatter (n-1)/n, broadcast 1.
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

enum class Collective { kAllreduce, kAllgather, kReduceScatter, kBroadcast };
const char* collectiveName(Collective collective);
double busBandwidthFactor(Collective collective, int ranks);

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
  Device device = Device::cpu();
  Milliseconds timeout{std::chrono::minutes(5)};
};

struct CollectiveBenchRow {
  uint64_t bytes = 0;
  uint64_t count = 0;
  double time_us[2] = {0, 0};  // [out-of-place, in-place]
  double algbw[2] = {0, 0};
  double busbw[2] = {0, 0};
  int64_t wrong[2] = {-1, -1};  // -1: not checked
};

// The sizes a run covers, each rounded down to whole elements divisible by
// the rank count where the collective needs it (as nccl-tests does).
std::vector<uint64_t> benchSizes(const CollectiveBenchOptions& options, int ranks);

// Runs the benchmark on every rank. Rank 0's rows hold times averaged over
// ranks and #wrong summed over ranks (exchanged through `store`); the other
// ranks' rows hold their own numbers. `on_row`, when set, is called with each
// row as soon as its size is measured (so a long sweep reports as it goes).
using RowCallback = std::function<void(const CollectiveBenchRow& row)>;
std::vector<CollectiveBenchRow> runCollectiveBench(Communicator& comm, Store& store,
                                                   const CollectiveBenchOptions& options,
                                                   const RowCallback& on_row = {});

// nccl-tests' table, printed by rank 0.
std::string formatCollectiveHeader(const CollectiveBenchOptions& options, int ranks,
                                   const std::vector<std::string>& device_lines);
std::string formatCollectiveRow(const CollectiveBenchOptions& options, const CollectiveBenchRow& row);
std::string formatCollectiveFooter(const std::vector<CollectiveBenchRow>& rows, bool check);
std::string collectiveRowsJson(const CollectiveBenchOptions& options, int ranks,
                               const std::string& backend, const std::vector<CollectiveBenchRow>& rows);

}  // namespace dtrain::bench
