#include "rank_processes.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "common/error.h"
#include "store/prefix_store.h"
#include "store/tcp_store.h"

namespace dtrain::testing {
namespace {

int runRank(const ChildSide& side, const RankProcesses::Body& body) {
  setProcessRank(side.rank);
  try {
    TcpStoreClientOptions options;
    options.host = "127.0.0.1";
    options.port = static_cast<uint16_t>(std::stoi(side.message));
    options.connect_timeout = std::chrono::seconds(30);
    options.timeout = std::chrono::seconds(120);
    auto store = std::make_shared<PrefixStore>("/run/nccl-test/gen/0", std::make_shared<TcpStore>(options));
    body(side.rank, store);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d FAILED: %s\n", side.rank, e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int cudaDeviceCountFromChild() {
  static const int count = [] {
    ForkedChild probe([](const ChildSide& side) {
      int devices = 0;
      if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
      side.report(std::to_string(devices));
      return 0;
    });
    const std::string reported = probe.readReport(std::chrono::steady_clock::now() + std::chrono::seconds(60));
    probe.reap();
    return reported.empty() ? 0 : std::atoi(reported.c_str());
  }();
  return count;
}

void setNcclTestEnvironment() {
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  setenv("NCCL_DEBUG", "WARN", /*overwrite=*/0);
}

int64_t monotonicNanos() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

RankProcesses::RankProcesses(int world, const Body& body) {
  ranks_ = std::make_unique<ForkedRanks>(
      world, [body](const ChildSide& side) { return runRank(side, body); }, ForkedChild::Start::kLater);
  // Only now start threads in this process (the server's), after every fork.
  TcpStoreServerOptions options;
  options.bind_address = "127.0.0.1";
  server_ = std::make_unique<TcpStoreServer>(options);
  ranks_->startAll(std::to_string(server_->port()));
}

RankProcesses::~RankProcesses() = default;

std::vector<int> RankProcesses::waitAll(std::chrono::seconds limit) { return ranks_->waitAll(limit); }

}  // namespace dtrain::testing
