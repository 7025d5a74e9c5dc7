// The options of `dtrain launch`, each declared once (common/options.h):
// torchrun's flags and dtrain's three additions (signals-to-handle,
// shutdown-timeout, exit-barrier-timeout) with their names, value forms,
// defaults, help and value checks. The tokenizer (launch_flags.h), --help
// (launchUsage), docs/settings.md (launchFlagsMarkdown) and parseLaunchArgs
// all read this one declaration. Private to launch/. No torch, no CUDA.
#pragma once

#include <map>
#include <string>

#include "common/options.h"
#include "launch/launch_config.h"

namespace dtrain {

// torchrun's Std.from_str: one digit for every local rank, or
// LOCAL_RANK:DIGIT,... (ranks not named: none).
struct StreamChoice {
  StreamSet all = StreamSet::kNone;
  std::map<int, StreamSet> ranks;
};

// --nproc-per-node as torchrun's determine_local_world_size reads it.
enum class WorkerCount {
  kNumber,  // as given
  kGpus,    // gpu: the visible GPUs, which must exist
  kCpus,    // cpu: the CPUs
  kAuto,    // auto: the visible GPUs if any, else the CPUs
};

// --start-method: accepted as torchrun does; dtrain always execs its workers.
enum class StartMethod { kSpawn, kFork, kForkserver };

// What the flags say, before parseLaunchArgs resolves them against each
// other, Slurm's environment and the machine.
struct LaunchFlagValues {
  LaunchConfig config;  // the fields a flag fills as it is
  // --nproc-per-node: a number (config.nproc_per_node), or a word counted
  // once the environment is known.
  WorkerCount worker_count = WorkerCount::kNumber;
  // --rdzv-endpoint: HOST[:PORT], or etcd's members, once the backend is known.
  std::string rdzv_endpoint;
  StartMethod start_method = StartMethod::kSpawn;
  bool module = false;
  bool no_python = false;
  bool run_path = false;  // torchrun's runpy: the script runs as by default
  StreamChoice redirects;
  StreamChoice tees;
};

// Declares every option of `dtrain launch` over `values`, in --help's order;
// each field starts at its declared default.
void declareLaunchFlags(OptionSet& set, LaunchFlagValues& values);

// The values and their declaration, kept together (the set holds references
// into the values).
struct LaunchFlags {
  LaunchFlags() { declareLaunchFlags(set, values); }
  LaunchFlagValues values;
  OptionSet set{"dtrain launch"};
};

}  // namespace dtrain
