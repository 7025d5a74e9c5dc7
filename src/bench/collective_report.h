// What rank 0 of `dtrain bench <collective>` prints: nccl-tests' table
// (header, one row per size, footer) under a first line that names the job,
// or the same rows as JSON.
#pragma once

#include <string>
#include <vector>

#include "bench/collective_bench.h"

namespace dtrain::bench {

// The job a table describes, gathered from every rank.
struct BenchJob {
  std::string backend;              // "gloo" or "nccl"
  int processes = 1;
  int gpus_per_process = 1;         // nccl-tests' -g; 1 for gloo
  std::vector<std::string> hosts;   // per rank
  std::vector<std::string> devices; // per rank: "cpu" or the CUDA device's name
  std::vector<std::string> device_lines;  // nccl-tests' "#  Rank ..." line per rank
  int ranks() const { return processes * gpus_per_process; }
};

// "# dtrain bench allreduce: nccl on 8 x NVIDIA H100 80GB HBM3 (4 processes x
// 2 GPUs), 2 hosts" or "# dtrain bench allreduce: gloo on cpu (2 processes),
// 1 host"; devices of different names are counted apart ("4 x A, 4 x B").
std::string formatCollectiveTitle(const CollectiveBenchOptions& options, const BenchJob& job);
// The title, nccl-tests' settings and device lines, and the column heads.
std::string formatCollectiveHeader(const CollectiveBenchOptions& options, const BenchJob& job);
std::string formatCollectiveRow(const CollectiveBenchOptions& options, const CollectiveBenchRow& row);
std::string formatCollectiveFooter(const std::vector<CollectiveBenchRow>& rows, bool check);
std::string collectiveRowsJson(const CollectiveBenchOptions& options, const BenchJob& job,
                               const std::vector<CollectiveBenchRow>& rows);

}  // namespace dtrain::bench
