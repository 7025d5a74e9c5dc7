// The active GPU check of `dtrain doctor --allreduce` (doctor/): a quick
// all-reduce across the local GPUs, run as `dtrain launch --standalone ...
// dtrain bench allreduce` in a child process group under a time limit.
#pragma once

#include <string>
#include <vector>

#include "doctor/check.h"

namespace dtrain::doctor {

// gpu.allreduce: one rank per GPU (CUDA_VISIBLE_DEVICES's count when set), a
// 256 MiB float sum, ctx.options.timeout_seconds for the whole run.
CheckResult checkAllreduce(const DoctorContext& ctx);

// gpu.sendrecv: the point-to-point bandwidth of every pair of local GPUs,
// the traffic between pipeline stages: `dtrain bench sendrecv` of 64 MiB
// (both directions at once) on each pair in turn (CUDA_VISIBLE_DEVICES set
// to the pair), ctx.options.timeout_seconds for each pair. Names the
// slowest pair; fails when it runs below half the median of the pairs
// (a link down or a pair routed through the host), or a pair's run fails.
CheckResult checkSendRecvPairs(const DoctorContext& ctx);

// One pair's measured bus bandwidth, and the verdict over all of them.
struct PairRate {
  std::string pair;  // "GPU0-GPU1" (the GPUs' CUDA_VISIBLE_DEVICES entries)
  double busbw_gbps = 0;
};
struct PairVerdict {
  size_t slowest = 0;  // index into the rates
  double median_gbps = 0;
  bool degraded = false;  // the slowest below half the median
};
PairVerdict judgePairs(const std::vector<PairRate>& rates);  // rates not empty

}  // namespace dtrain::doctor
