#include "bench/collective_job.h"

#include <unistd.h>

#include <exception>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/collective_report.h"
#include "bench/device_memory.h"
#include "comm/communicator.h"
#include "common/error.h"
#include "common/host.h"
#include "store/store.h"

namespace dtrain::bench {
namespace {

struct JobState {
  JobState(World& w, const CollectiveBenchOptions& o, const CollectiveJobOptions& j, std::FILE* f)
      : world(w), base(o), job(j), out(f) {}
  World& world;
  const CollectiveBenchOptions& base;
  const CollectiveJobOptions& job;
  std::FILE* out;
  int first_device = 0;
  std::mutex mutex;
  int64_t wrong = 0;  // guarded by mutex
};

bool usesCuda(const CollectiveJobOptions& job) { return job.backend == "nccl"; }

// The first CUDA device of this process (see collective_job.h).
int firstDevice(const World& world, const CollectiveJobOptions& job) {
  if (!usesCuda(job)) return 0;
  const int g = job.gpus_per_process;
  const int visible = cudaDeviceCount();
  const int first = visible == g ? 0 : world.local_rank * g;
  if (first + g > visible) {
    throw ConfigError("-g/--ngpus " + std::to_string(g) + " on local rank " + std::to_string(world.local_rank) +
                      " needs CUDA devices " + std::to_string(first) + ".." + std::to_string(first + g - 1) +
                      ", but this process sees " + std::to_string(visible) +
                      " (check -g, the processes per node and CUDA_VISIBLE_DEVICES)");
  }
  return first;
}

std::string rankKey(int rank) { return "bench/rank/" + std::to_string(rank); }

// Publishes where this rank runs; rank 0 reads every rank's entry.
void publishRank(Store& store, int rank, Device device, const std::string& backend) {
  char line[512];
  std::snprintf(line, sizeof(line), "#  Rank %2d Group  0 Pid %6d on %10s %s (%s)", rank, getpid(),
                hostName().c_str(), deviceDescription(device).c_str(), backend.c_str());
  nlohmann::json entry{{"line", line}, {"host", hostName()}, {"device", deviceName(device)}};
  store.set(rankKey(rank), entry.dump());
}

BenchJob gatherJob(Store& store, const World& world, const CollectiveJobOptions& job) {
  BenchJob described;
  described.backend = job.backend;
  described.processes = world.size;
  described.gpus_per_process = job.gpus_per_process;
  for (int r = 0; r < described.ranks(); ++r) {
    auto entry = nlohmann::json::parse(store.get(rankKey(r)));
    described.device_lines.push_back(entry["line"].get<std::string>());
    described.hosts.push_back(entry["host"].get<std::string>());
    described.devices.push_back(entry["device"].get<std::string>());
  }
  return described;
}

void printNow(std::FILE* out, const std::string& text) {
  std::fputs(text.c_str(), out);
  std::fflush(out);
}

// One rank of the job, on the calling thread.
void runRank(JobState& state, int index) {
  const int g = state.job.gpus_per_process;
  const int rank = state.world.rank * g + index;
  const int ranks = state.world.size * g;
  CollectiveBenchOptions options = state.base;
  CommunicatorOptions comm_options;
  comm_options.store_prefix = "bench/comm";
  comm_options.device = state.first_device + index;
  comm_options.init_timeout = std::chrono::seconds(120);
  if (usesCuda(state.job)) {
    selectCudaDevice(comm_options.device);
    options.device = Device::cuda(comm_options.device);
  }
  auto comm = createCommunicator(state.job.backend, state.world.store, rank, ranks, comm_options);
  publishRank(*state.world.store, rank, options.device, state.job.backend);
  const bool printer = rank == 0;
  BenchJob described;
  if (printer) {
    described = gatherJob(*state.world.store, state.world, state.job);
    if (!state.job.json) printNow(state.out, formatCollectiveHeader(options, described));
  }

  std::vector<ReduceOp> ops = state.job.ops;
  if (!isReducing(options.collective)) ops.resize(1);
  std::vector<CollectiveBenchRow> all_rows;
  int64_t wrong = 0;
  for (DType dtype : state.job.dtypes) {
    for (ReduceOp op : ops) {
      options.dtype = dtype;
      options.op = op;
      // Each row is printed as its size finishes: a sweep to 1 GiB takes minutes.
      auto rows = runCollectiveBench(*comm, *state.world.store, options, [&](const CollectiveBenchRow& row) {
        for (int64_t w : row.wrong) wrong += w > 0 ? w : 0;
        if (printer && !state.job.json) printNow(state.out, formatCollectiveRow(options, row));
      });
      if (printer && state.job.json) printNow(state.out, collectiveRowsJson(options, described, rows));
      all_rows.insert(all_rows.end(), rows.begin(), rows.end());
    }
  }
  if (printer && !state.job.json) printNow(state.out, formatCollectiveFooter(all_rows, options.check));
  // The communicator reports to the store until it is closed.
  comm.reset();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.wrong += wrong;
}

}  // namespace

void checkCollectiveJob(const CollectiveBenchOptions& options, const CollectiveJobOptions& job) {
  if (job.gpus_per_process < 1) {
    throw ConfigError("-g/--ngpus " + std::to_string(job.gpus_per_process) + " is not a GPU count; expected 1 or more");
  }
  if (!usesCuda(job) && job.gpus_per_process > 1) {
    throw ConfigError("-g/--ngpus " + std::to_string(job.gpus_per_process) +
                      " needs CUDA (the nccl backend); " + job.backend + " runs one CPU rank per process");
  }
  if (!usesCuda(job) && options.graph_launches > 0) {
    throw ConfigError("-G/--cudagraph " + std::to_string(options.graph_launches) +
                      " needs CUDA (the nccl backend); " + job.backend + " runs on the CPU");
  }
}

int64_t runCollectiveJob(World& world, const CollectiveBenchOptions& options, const CollectiveJobOptions& job,
                         std::FILE* out) {
  checkCollectiveJob(options, job);
  JobState state(world, options, job, out);
  state.first_device = firstDevice(world, job);
  if (job.gpus_per_process == 1) {
    runRank(state, 0);
    return state.wrong;
  }
  std::vector<std::exception_ptr> failures(job.gpus_per_process);
  std::vector<std::thread> threads;
  for (int i = 0; i < job.gpus_per_process; ++i) {
    threads.emplace_back([&state, &failures, i] {
      try {
        runRank(state, i);
      } catch (...) {
        failures[i] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& f : failures) {
    if (f) std::rethrow_exception(f);
  }
  return state.wrong;
}

}  // namespace dtrain::bench
