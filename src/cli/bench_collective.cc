// `dtrain bench allreduce|allgather|reduce_scatter|broadcast|sendrecv|alltoall|reduce|gather|scatter`: nccl-tests'
// flags and table over dtrain's collectives, one or more GPUs per process
// (-g) or one CPU rank per process with gloo, ranks from the launcher's
// environment (torchrun's variables, or srun's / mpirun's).
#include <cstdio>
#include <memory>

#include "bench/collective_bench.h"
#include "bench/collective_job.h"
#include "bench/device_memory.h"
#include "bench/launcher_environment.h"
#include "cli/commands.h"
#include "cli/option_binding.h"
#include "comm/communicator.h"
#include "comm/world.h"
#include "common/error.h"
#include "common/log.h"
#include "common/units.h"

namespace dtrain::cli {
namespace {

// --backend (auto: nccl when GPUs are visible).
enum class BenchBackend { kAuto, kGloo, kNccl };

struct CollectiveFlags {
  std::string min_bytes = "32M", max_bytes = "32M", step_bytes, dtype = "float", op = "sum";
  BenchBackend backend = BenchBackend::kAuto;
  uint64_t factor = 2;
  int root = 0, iters = 20, warmup = 5, check = 1;
  int average = 1, blocking = 0, cuda_graph = 0, ngpus = 1;
  double timeout_s = 300;
  bool json = false;
};

std::vector<DType> allDTypes() {
  return {DType::kInt32, DType::kUInt8, DType::kInt64, DType::kFloat16, DType::kFloat32,
          DType::kFloat64, DType::kBFloat16};
}
std::vector<ReduceOp> allReduceOps() {
  return {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
}

// The backend's name, as comm/ and bench/ take it.
std::string resolveBackend(BenchBackend requested) {
  switch (requested) {
    case BenchBackend::kGloo: return "gloo";
    case BenchBackend::kNccl: return "nccl";
    case BenchBackend::kAuto: break;
  }
  return backendAvailable("nccl") && bench::cudaDeviceCount() > 0 ? "nccl" : "gloo";
}

bench::CollectiveBenchOptions toOptions(const CollectiveFlags& f, bench::Collective collective) {
  bench::CollectiveBenchOptions o;
  o.collective = collective;
  o.min_bytes = parseByteSize(f.min_bytes, "-b/--minbytes");
  o.max_bytes = parseByteSize(f.max_bytes, "-e/--maxbytes");
  if (o.min_bytes > o.max_bytes) {
    throw ConfigError("-b/--minbytes " + f.min_bytes + " is larger than -e/--maxbytes " + f.max_bytes +
                      "; expected minbytes <= maxbytes");
  }
  if (!f.step_bytes.empty()) {
    o.step = parseByteSize(f.step_bytes, "-i/--stepbytes");
    if (o.step == 0) throw ConfigError("-i/--stepbytes must be at least 1 byte");
  } else if (f.factor < 2 && o.min_bytes != o.max_bytes) {
    throw ConfigError("-f/--stepfactor " + std::to_string(f.factor) + " would never reach -e; expected 2 or more");
  }
  o.factor = f.factor;
  o.dtype = f.dtype == "all" ? DType::kFloat32 : parseDType(f.dtype);
  o.op = f.op == "all" ? ReduceOp::kSum : parseReduceOp(f.op);
  o.root = f.root;
  o.iters = f.iters;
  o.warmup = f.warmup;
  o.check = f.check != 0;
  o.rank_time = static_cast<bench::RankTime>(f.average);
  o.blocking = f.blocking;
  o.graph_launches = f.cuda_graph;
  if (o.blocking > 0 && o.graph_launches > 0) {
    // As nccl-tests: a captured graph cannot wait for its operations one by one.
    throw ConfigError("-z/--blocking " + std::to_string(o.blocking) + " cannot be combined with -G/--cudagraph " +
                      std::to_string(o.graph_launches) + "; expected -z 0 with a CUDA graph");
  }
  o.timeout = Milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  return o;
}

int runCollective(const CollectiveFlags& flags, bench::Collective collective) {
  bench::CollectiveBenchOptions options = toOptions(flags, collective);
  bench::CollectiveJobOptions job;
  job.backend = resolveBackend(flags.backend);
  job.gpus_per_process = flags.ngpus;
  job.json = flags.json;
  // nccl-tests' "-d all" / "-o all": every dtype and op in one table.
  job.dtypes = flags.dtype == "all" ? allDTypes() : std::vector<DType>{options.dtype};
  job.ops = flags.op == "all" ? allReduceOps() : std::vector<ReduceOp>{options.op};
  // -g and -G are refused before this rank makes the others wait for it.
  bench::checkCollectiveJob(options, job);
  if (auto started = bench::adoptLauncherEnvironment()) {
    DTRAIN_LOG_INFO("rank " << started->rank << " of " << started->size << " from " << started->launcher
                            << "'s environment; rendezvous at " << started->master_addr << ":"
                            << started->master_port);
  }
  World world = worldFromEnvironment();
  const int ranks = world.size * flags.ngpus;
  if (options.root < 0 || options.root >= ranks) {
    throw ConfigError("-r/--root " + std::to_string(options.root) + " is not a rank; expected 0.." +
                      std::to_string(ranks - 1));
  }
  int64_t wrong = bench::runCollectiveJob(world, options, job, stdout);
  leaveWorld(world, options.timeout);
  if (wrong > 0) {
    DTRAIN_LOG_ERROR(wrong << " wrong elements in the check (-c); see #wrong");
    return 1;
  }
  return 0;
}

// "" when `parse(text)` accepts the text, else `why`.
template <typename Parse>
std::string refusedBy(Parse parse, const std::string& text, const char* why) {
  try {
    parse(text);
  } catch (const ConfigError&) {
    return why;
  }
  return "";
}

std::string checkSize(const std::string& text) {
  if (text.empty()) return "";
  return refusedBy([](const std::string& t) { parseByteSize(t, "size"); }, text, "not a size");
}

void declareCollectiveOptions(OptionSet& set, CollectiveFlags& f) {
  const char* sizes = "a size in bytes with an optional K/M/G suffix (64, 512K, 32M)";
  set.text("-b,--minbytes", f.min_bytes, "Smallest size (bytes, K/M/G suffix)").check(checkSize, sizes).nonEmpty();
  set.text("-e,--maxbytes", f.max_bytes, "Largest size (bytes, K/M/G suffix)").check(checkSize, sizes).nonEmpty();
  set.integer("-f,--stepfactor", f.factor, "Multiply the size by this each step").range(1, uint64_t{1} << 20);
  set.text("-i,--stepbytes", f.step_bytes, "Add this many bytes each step instead of -f").check(checkSize, sizes);
  set.text("-d,--datatype", f.dtype, "float, double, half, bfloat16, int32, int64, uint8, or all")
      .check(
          [](const std::string& text) {
            return text == "all" ? std::string() : refusedBy(parseDType, text, "not a dtype");
          },
          "a dtype (float, double, half, bfloat16, int32, int64, uint8) or all");
  set.text("-o,--op", f.op, "sum, avg, min, max, prod, or all")
      .check(
          [](const std::string& text) {
            return text == "all" ? std::string() : refusedBy(parseReduceOp, text, "not a reduce op");
          },
          "sum, avg, min, max, prod or all");
  set.integer("-r,--root", f.root, "Root rank (broadcast, reduce, gather, scatter)").range(0, 1 << 20);
  set.integer("-n,--iters", f.iters, "Timed iterations per size").range(1, 1 << 24);
  set.integer("-w,--warmup_iters", f.warmup, "Untimed iterations per size").range(0, 1 << 24);
  set.integer("-c,--check", f.check, "Check results against a host reference (0/1)").range(0, 1);
  set.integer("-a,--average", f.average, "Time across ranks: 0 rank 0's, 1 average, 2 min, 3 max").range(0, 3);
  set.integer("-z,--blocking", f.blocking,
              "0 back to back; after each op: 1 wait and barrier, 2 wait, 3 wait and barrier (barrier untimed)")
      .range(0, 3);
  set.integer("-G,--cudagraph,--cuda_graph", f.cuda_graph,
              "Capture the -n iterations into a CUDA graph and launch it this many times (0: no graph)")
      .range(0, 1 << 20);
  set.integer("-g,--ngpus", f.ngpus, "GPUs per process: one thread and communicator rank each (nccl)")
      .range(1, 64);
  set.choice("--backend", f.backend,
             {{"auto", BenchBackend::kAuto}, {"gloo", BenchBackend::kGloo}, {"nccl", BenchBackend::kNccl}},
             "auto (nccl when GPUs are visible), gloo or nccl");
  set.number("--timeout", f.timeout_s, "Seconds before a collective is declared hung")
      .above(0)
      .atMost(7 * 24 * 3600)
      .unit("seconds");
  set.toggle("--json", f.json, "Print the results as JSON (rank 0)");
}

void registerCollective(CLI::App& bench, ExitCode& exit_code, const char* name, bench::Collective collective,
                        const char* help) {
  CLI::App* cmd = bench.add_subcommand(name, help);
  // One table in the docs for the nine commands: they share their options.
  auto bound = bindNew<CollectiveFlags>(*cmd, "dtrain bench allreduce|allgather|reduce_scatter|broadcast|sendrecv|alltoall|reduce|gather|scatter",
                                        declareCollectiveOptions);
  cmd->footer("Ranks come from RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/MASTER_PORT (or DTRAIN_STORE_ADDR),\n"
              "as `dtrain launch` and torchrun set them, or from srun (SLURM_PROCID, SLURM_NTASKS) or\n"
              "mpirun (OMPI_COMM_WORLD_*, PMI_*). -g GPUs per process (default 1).");
  cmd->callback([bound, collective, &exit_code] { exit_code.value = runCollective(bound->options, collective); });
}

}  // namespace

void registerBenchCollectives(CLI::App& bench, ExitCode& exit_code) {
  registerCollective(bench, exit_code, "allreduce", bench::Collective::kAllreduce,
                     "All-reduce bandwidth, nccl-tests style (all_reduce_perf)");
  registerCollective(bench, exit_code, "allgather", bench::Collective::kAllgather,
                     "All-gather bandwidth, nccl-tests style (all_gather_perf)");
  registerCollective(bench, exit_code, "reduce_scatter", bench::Collective::kReduceScatter,
                     "Reduce-scatter bandwidth, nccl-tests style (reduce_scatter_perf)");
  registerCollective(bench, exit_code, "broadcast", bench::Collective::kBroadcast,
                     "Broadcast bandwidth, nccl-tests style (broadcast_perf)");
  registerCollective(bench, exit_code, "sendrecv", bench::Collective::kSendRecv,
                     "Point-to-point bandwidth, nccl-tests style (sendrecv_perf): each rank sends to the next and "
                     "receives from the previous at once");
  registerCollective(bench, exit_code, "alltoall", bench::Collective::kAlltoall,
                     "All-to-all bandwidth, nccl-tests style (alltoall_perf)");
  registerCollective(bench, exit_code, "reduce", bench::Collective::kReduce,
                     "Reduce (to a root) bandwidth, nccl-tests style (reduce_perf)");
  registerCollective(bench, exit_code, "gather", bench::Collective::kGather,
                     "Gather (to a root) bandwidth, nccl-tests style (gather_perf)");
  registerCollective(bench, exit_code, "scatter", bench::Collective::kScatter,
                     "Scatter (from a root) bandwidth, nccl-tests style (scatter_perf)");
}

}  // namespace dtrain::cli
