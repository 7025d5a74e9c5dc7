// Slurm's environment as launch defaults (launch/): under `srun dtrain launch`
// every node learns the node count, its node rank, node 0's address and its
// GPU count from the variables Slurm sets, so a job script needs no flags.
#pragma once

#include <map>
#include <set>
#include <string>

#include "launch/launch_config.h"

namespace dtrain {

// When SLURM_JOB_ID is set (non-empty), fills what `explicit_flags` (the
// canonical names, "nnodes", "node-rank", ..., of the flags given on the
// command line or through PET_ variables) does not name:
//   nnodes          min = max = SLURM_STEP_NUM_NODES (inside srun), else
//                   SLURM_JOB_NUM_NODES, else SLURM_NNODES
//   node-rank       SLURM_NODEID
//   master-addr     the first host of SLURM_STEP_NODELIST, else
//                   SLURM_JOB_NODELIST, else SLURM_NODELIST (expandHostlist);
//                   also the c10d endpoint host unless rdzv-endpoint is given
//   nproc-per-node  SLURM_GPUS_ON_NODE when > 0, else countVisibleGpus(env,
//                   device_root) when > 0, else unchanged
//   rdzv-id         SLURM_JOB_ID
// With config.standalone only nproc-per-node is taken (a standalone run is
// one node on loopback). A variable that is set but malformed raises
// ConfigError naming it; one that is missing leaves the field unchanged.
// Without SLURM_JOB_ID nothing changes. The caller validates afterwards
// (node rank < nodes, ...).
void applySlurmEnvironment(LaunchConfig& config, const std::map<std::string, std::string>& env,
                           const std::set<std::string>& explicit_flags,
                           const std::string& device_root = "");

}  // namespace dtrain
