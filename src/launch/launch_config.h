// Everything `dtrain launch` was asked to do, resolved from torchrun's flags,
// their PET_<FLAG> environment equivalents, Slurm's environment and the
// machine (GPU count). No torch, no CUDA.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rendezvous/rendezvous.h"

namespace dtrain {

// Which of a worker's streams go to files only (redirects) or to files and
// the console (tee): torchrun's 0 none, 1 stdout, 2 stderr, 3 both.
enum class StreamSet { kNone = 0, kStdout = 1, kStderr = 2, kBoth = 3 };

struct LaunchConfig {
  RendezvousConfig rendezvous;       // nodes, endpoint, run id, timeouts, node rank
  int nproc_per_node = 1;
  std::string role = "default";
  int max_restarts = 0;
  std::chrono::milliseconds monitor_interval{std::chrono::milliseconds(100)};
  std::chrono::milliseconds shutdown_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds exit_barrier_timeout{std::chrono::seconds(300)};
  std::string log_dir;               // "" = a fresh directory under $TMPDIR
  // Per local rank; a rank missing from the map uses the `all` entry.
  // parseLaunchArgs fills local ranks 0..nproc_per_node-1 and the `all`
  // entry (kAllLocalRanks, log_router.h): the one digit of "-r 3", or kNone
  // for the per-rank form "-r 0:1,1:2" (torchrun: unnamed ranks get none).
  std::map<int, StreamSet> redirects;
  std::map<int, StreamSet> tees;
  std::optional<std::set<int>> local_ranks_filter;  // console shows only these ranks
  std::string log_line_prefix_template;  // "" = default; ${rank} ${local_rank} ${role_name} ${host}
  std::vector<int> signals_to_handle;  // SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 by default
  // The worker command: python (PYTHON_EXEC or python3) -u [-m] script args,
  // or the executable itself with --no-python.
  std::vector<std::string> worker_argv;
  std::string master_addr;  // static rendezvous (defaults 127.0.0.1)
  int master_port = 29500;
  // The MASTER_PORT the workers get. Static rendezvous: --master-port, as
  // under torchrun (a firewall may open only that port), so the agents'
  // own store listens elsewhere: a free loopback port on a single node,
  // --master-port + 1 across nodes. 0 (c10d, etcd, --standalone): the
  // agent picks a free port each round, and another one when the workers
  // find it taken before they bound it.
  int worker_master_port = 0;
  // The workers' Python, for the failure summary: its full path (PYTHON_EXEC,
  // else python3 on PATH, resolved as exec will) and where it came from
  // ("PYTHON_EXEC" or "python3 on PATH"); both "" when no python runs.
  std::string python_path;
  std::string python_origin;
  // torchrun's rule: more than one worker on this node and OMP_NUM_THREADS
  // unset: the workers get OMP_NUM_THREADS=1 and the agent says so once.
  bool default_omp_num_threads = false;
  bool standalone = false;  // --standalone: c10d on 127.0.0.1, a free port, a fresh run id
  // rendezvous.run_id: --rdzv-id, else Slurm's job id, else (a single node,
  // which shares its id with no other) a fresh one, localRunId(); a job of
  // several nodes keeps torchrun's "none" (every node must name the same).
  // -h/--help before the script: parseLaunchArgs returns at once with only
  // this set (nothing else parsed or validated); print launchUsage().
  bool help_requested = false;
};

// Parses a torchrun command line (everything after `dtrain launch`) against
// the options declared in launch_options.h.
// Accepts dash and underscore spellings (--nproc-per-node, --nproc_per_node),
// `--flag value` and `--flag=value`, and PET_<FLAG> environment variables
// (PET_NPROC_PER_NODE, ...) for flags not given; explicit flags win over
// PET_ variables, which win over Slurm's environment, which wins over
// defaults. Throws ConfigError naming the flag and what was expected
// (`--nnodes 3:2`: "--nnodes 3:2: MIN must not exceed MAX"), or for an
// unknown flag ("unrecognized argument --frobnicate").
// `env` is the environment to read (tests pass their own); `device_root`
// is the filesystem root countVisibleGpus looks under (tests: a fixture tree).
// Under Slurm (SLURM_JOB_ID set) applySlurmEnvironment (launch/slurm.h) fills
// what neither a flag nor a PET_ variable gave.
LaunchConfig parseLaunchArgs(const std::vector<std::string>& args,
                             const std::map<std::string, std::string>& env,
                             const std::string& device_root = "");

// A run id unique on this host: "job-<UTC yyyymmdd-HHMMSS>-<pid>".
std::string localRunId();

// `dtrain launch --help`: every declared option with its default and help.
std::string launchUsage();

// True when path (or, for a bare name, the first executable of that name on
// PATH) is an ELF binary: the launcher runs it without python.
bool isElfExecutable(const std::string& path);

// GPUs visible to this process without linking CUDA: the NVIDIA devices
// under `root`/proc/driver/nvidia/gpus (or /dev/nvidiaN), narrowed by
// CUDA_VISIBLE_DEVICES when set ("" or "-1" means none; indices or UUIDs).
int countVisibleGpus(const std::map<std::string, std::string>& env, const std::string& root = "");

}  // namespace dtrain
