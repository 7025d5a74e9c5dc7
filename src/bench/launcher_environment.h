// Starting `dtrain bench <collective>` the way nccl-tests is started: by srun
// or mpirun instead of `dtrain launch`/torchrun. When RANK and WORLD_SIZE are
// not set, the job is read from the launcher's own variables, first match
// wins (MPI before Slurm: mpirun inside an allocation inherits SLURM_*):
//   Open MPI:      OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   MPICH / Hydra: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   Slurm (srun):  SLURM_PROCID, SLURM_NTASKS (else SLURM_NPROCS), SLURM_LOCALID
// Rank 0 hosts the rendezvous store at MASTER_ADDR:MASTER_PORT, which win
// when set. Otherwise the address is the first host of SLURM_STEP_NODELIST,
// else of SLURM_JOB_NODELIST (srun puts task 0 there; mpirun inside an
// allocation starts on it too), or 127.0.0.1 when every rank runs on this host
// (local size = size); and the port is 10000 + SLURM_JOB_ID mod 50000 in a
// Slurm job, else 29500 (torchrun's default).
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace dtrain::bench {

struct LauncherJob {
  std::string launcher;  // "Open MPI", "MPICH/Hydra" or "Slurm"
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  std::optional<int> local_size;
  std::string master_addr;
  int master_port = 29500;
};

using EnvironmentLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The job of an srun/mpirun start, or nullopt when RANK or WORLD_SIZE is set
// (a torchrun-style launcher) or no launcher's variables are. Throws
// ConfigError naming the variable that is malformed, or saying that
// MASTER_ADDR must be set when the ranks span hosts and no node list names
// rank 0's host.
std::optional<LauncherJob> launcherJob(const EnvironmentLookup& lookup);

// Reads this process's environment and, for an srun/mpirun start, sets
// RANK, WORLD_SIZE, LOCAL_RANK (LOCAL_WORLD_SIZE when known), MASTER_ADDR and
// MASTER_PORT from it, so that comm/world.h finds the job. Returns the job
// (nullopt when nothing was set).
std::optional<LauncherJob> adoptLauncherEnvironment();

}  // namespace dtrain::bench
