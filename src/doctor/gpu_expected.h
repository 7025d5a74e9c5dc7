// How many GPUs this node should have (doctor/): --expect-gpus, else what
// Slurm gave the job on this node.
#pragma once

#include <optional>
#include <string>

#include "doctor/check.h"

namespace dtrain::doctor {

struct ExpectedGpus {
  std::optional<int> count;  // nullopt: nothing expected
  std::string source;        // "--expect-gpus", "SLURM_GPUS_ON_NODE", ...
  std::string error;         // a Slurm variable that does not parse: the message
};

// ctx.options.expect_gpus, else SLURM_GPUS_ON_NODE, else the number of ids
// in SLURM_JOB_GPUS / SLURM_STEP_GPUS ("0,1,2,3"), else SLURM_GPUS_PER_NODE
// ("4", "h100:4", "a100:2,h100:2": the counts summed).
ExpectedGpus expectedGpus(const DoctorContext& ctx);

// "GPU3".
std::string gpuName(unsigned gpu);

}  // namespace dtrain::doctor
