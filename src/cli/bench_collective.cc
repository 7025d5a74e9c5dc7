// `dtrain bench allreduce|allgather|reduce_scatter|broadcast`: nccl-tests'
// flags and table over dtrain's collectives, one process per GPU (or per CPU
// rank with gloo), ranks from the launcher's environment.
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "bench/collective_bench.h"
#include "bench/device_memory.h"
#include "cli/commands.h"
#include "cli/option_binding.h"
#include "comm/communicator.h"
#include "comm/world.h"
#include "common/host.h"
#include "common/error.h"
#include "common/log.h"
#include "common/units.h"
#include "store/store.h"

namespace dtrain::cli {
namespace {

struct CollectiveFlags {
  std::string min_bytes = "32M", max_bytes = "32M", step_bytes, dtype = "float", op = "sum";
  std::string backend = "auto";
  uint64_t factor = 2;
  int root = 0, iters = 20, warmup = 5, check = 1;
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

std::string resolveBackend(const std::string& requested) {
  if (requested == "gloo" || requested == "nccl") return requested;
  if (requested != "auto") {
    throw ConfigError("--backend '" + requested + "' is not a backend; expected auto, gloo or nccl");
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
  o.timeout = Milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  return o;
}

int runCollective(const CollectiveFlags& flags, bench::Collective collective) {
  bench::CollectiveBenchOptions options = toOptions(flags, collective);
  std::string backend = resolveBackend(flags.backend);
  World world = worldFromEnvironment();
  if (options.root < 0 || options.root >= world.size) {
    throw ConfigError("-r/--root " + std::to_string(options.root) + " is not a rank; expected 0.." +
                      std::to_string(world.size - 1));
  }
  CommunicatorOptions comm_options;
  comm_options.store_prefix = "bench/comm";
  comm_options.device = world.local_rank;
  comm_options.init_timeout = std::chrono::seconds(120);
  if (backend == "nccl") {
    bench::selectCudaDevice(world.local_rank);
    options.device = Device::cuda(world.local_rank);
  }
  auto comm = createCommunicator(backend, world.store, world.rank, world.size, comm_options);

  char line[512];
  std::snprintf(line, sizeof(line), "#  Rank %2d Group  0 Pid %6d on %10s %s (%s)", world.rank, getpid(),
                hostName().c_str(),
                bench::deviceDescription(options.device).c_str(), backend.c_str());
  world.store->set("bench/device/" + std::to_string(world.rank), line);
  if (world.rank == 0 && !flags.json) {
    std::vector<std::string> lines;
    for (int r = 0; r < world.size; ++r) lines.push_back(world.store->get("bench/device/" + std::to_string(r)));
    std::fputs(bench::formatCollectiveHeader(options, world.size, lines).c_str(), stdout);
    std::fflush(stdout);
  }

  // nccl-tests' "-d all" / "-o all": every dtype and op in one table.
  std::vector<DType> dtypes = flags.dtype == "all" ? allDTypes() : std::vector<DType>{options.dtype};
  std::vector<ReduceOp> ops = flags.op == "all" ? allReduceOps() : std::vector<ReduceOp>{options.op};
  bool reducing = collective == bench::Collective::kAllreduce || collective == bench::Collective::kReduceScatter;
  if (!reducing) ops.resize(1);
  std::vector<bench::CollectiveBenchRow> all_rows;
  int64_t wrong = 0;
  for (DType dtype : dtypes) {
    for (ReduceOp op : ops) {
      options.dtype = dtype;
      options.op = op;
      // Each row is printed as its size finishes: a sweep to 1 GiB takes minutes.
      auto rows = bench::runCollectiveBench(*comm, *world.store, options, [&](const bench::CollectiveBenchRow& row) {
        for (int64_t w : row.wrong) wrong += w > 0 ? w : 0;
        if (world.rank == 0 && !flags.json) {
          std::fputs(bench::formatCollectiveRow(options, row).c_str(), stdout);
          std::fflush(stdout);
        }
      });
      if (world.rank == 0 && flags.json) {
        std::fputs(bench::collectiveRowsJson(options, world.size, backend, rows).c_str(), stdout);
      }
      all_rows.insert(all_rows.end(), rows.begin(), rows.end());
    }
  }
  if (world.rank == 0 && !flags.json) {
    std::fputs(bench::formatCollectiveFooter(all_rows, options.check).c_str(), stdout);
    std::fflush(stdout);
  }
  // The communicator reports to the store until it is closed.
  comm.reset();
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
  set.integer("-r,--root", f.root, "Root rank (broadcast)").range(0, 1 << 20);
  set.integer("-n,--iters", f.iters, "Timed iterations per size").range(1, 1 << 24);
  set.integer("-w,--warmup_iters", f.warmup, "Untimed iterations per size").range(0, 1 << 24);
  set.integer("-c,--check", f.check, "Check results against a host reference (0/1)").range(0, 1);
  set.choice("--backend", f.backend, {"auto", "gloo", "nccl"}, "auto (nccl when GPUs are visible), gloo or nccl");
  set.number("--timeout", f.timeout_s, "Seconds before a collective is declared hung")
      .above(0)
      .atMost(7 * 24 * 3600)
      .unit("seconds");
  set.toggle("--json", f.json, "Print the results as JSON (rank 0)");
}

void registerCollective(CLI::App& bench, ExitCode& exit_code, const char* name, bench::Collective collective,
                        const char* help) {
  CLI::App* cmd = bench.add_subcommand(name, help);
  // One table in the docs for the four commands: they share their options.
  auto bound = bindNew<CollectiveFlags>(*cmd, "dtrain bench allreduce|allgather|reduce_scatter|broadcast",
                                        declareCollectiveOptions);
  cmd->footer("Ranks come from RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/MASTER_PORT (or DTRAIN_STORE_ADDR),\n"
              "as `dtrain launch` and torchrun set them. One process per GPU.");
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
}

}  // namespace dtrain::cli
