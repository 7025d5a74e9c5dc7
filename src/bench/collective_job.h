// One process's part of `dtrain bench <collective>`.
//
// A process drives `gpus_per_process` ranks (nccl-tests' -g): one thread per
// GPU, each with its own communicator of the whole job, rank = process *
// gpus_per_process + i on CUDA device first + i, where first is 0 when the
// process sees exactly gpus_per_process devices (a launcher that gives each
// task its own GPUs) and local_rank * gpus_per_process otherwise. With gloo a
// process is one CPU rank. Global rank 0 prints the table: the header once
// every rank has joined, then each row as soon as its size is measured.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/collective_bench.h"
#include "comm/world.h"

namespace dtrain::bench {

struct CollectiveJobOptions {
  std::string backend = "gloo";  // "gloo" or "nccl"
  int gpus_per_process = 1;      // more than 1 only with nccl
  std::vector<DType> dtypes{DType::kFloat32};    // one table section per dtype x op
  std::vector<ReduceOp> ops{ReduceOp::kSum};
  bool json = false;             // JSON instead of the table
};

// ConfigError naming the flag for -g above 1 or -G without CUDA (gloo), or
// a -g below 1. runCollectiveJob checks it too; a command calls it before
// joining the job so that bad flags never make the other ranks wait.
void checkCollectiveJob(const CollectiveBenchOptions& options, const CollectiveJobOptions& job);

// Runs this process's ranks to the end. Returns the wrong elements this
// process's ranks saw (on the process of rank 0: summed over every rank).
// Throws ConfigError for -g or -G without CUDA, or GPUs that are not there.
int64_t runCollectiveJob(World& world, const CollectiveBenchOptions& options, const CollectiveJobOptions& job,
                         std::FILE* out);

}  // namespace dtrain::bench
