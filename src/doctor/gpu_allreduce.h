// The active GPU check of `dtrain doctor --allreduce` (doctor/): a quick
// all-reduce across the local GPUs, run as `dtrain launch --standalone ...
// dtrain bench allreduce` in a child process group under a time limit.
#pragma once

#include "doctor/check.h"

namespace dtrain::doctor {

// gpu.allreduce: one rank per GPU (CUDA_VISIBLE_DEVICES's count when set), a
// 256 MiB float sum, ctx.options.timeout_seconds for the whole run.
CheckResult checkAllreduce(const DoctorContext& ctx);

}  // namespace dtrain::doctor
