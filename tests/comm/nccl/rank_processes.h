// One forked process per rank, for the NCCL backend's tests: a real NCCL
// group needs one process per GPU, and a rank that dies must really die.
//
// CUDA must never be initialized in the test's own process: a child forked
// from a process with a CUDA context inherits a broken copy of it. So the
// device count is probed in a throwaway child, and the parent forks the
// ranks before it starts any thread (the store server starts afterwards and
// sends its port to the children through pipes).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/process.h"
#include "tests/support/forked_child.h"

namespace dtrain {

class Store;
class TcpStoreServer;

namespace testing {

// CUDA devices this machine offers, counted by cudaGetDeviceCount in a forked
// child; 0 when CUDA is unusable (no driver, no GPU). Cached.
int cudaDeviceCountFromChild();

// NCCL settings every NCCL test wants, set before any fork unless the user
// set them: NVLink multicast (NVLS) stays off, and NCCL explains failures.
void setNcclTestEnvironment();

// CLOCK_MONOTONIC in nanoseconds: comparable between processes of one host.
int64_t monotonicNanos();

class RankProcesses {
 public:
  // Runs `body(rank, store)` in `world` forked children (tests/support's
  // ForkedRanks). `store` is a TcpStore client of the parent's server,
  // prefixed like a launched job's generation. A child exits 0 when body
  // returns, 1 (message on stderr) when it throws.
  using Body = std::function<void(int rank, std::shared_ptr<Store> store)>;
  RankProcesses(int world, const Body& body);
  ~RankProcesses();
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;

  // Waits until every child exited or `limit` passed; children still running
  // then are SIGKILLed. Returns one raw wait status per rank.
  std::vector<int> waitAll(std::chrono::seconds limit);

 private:
  std::unique_ptr<ForkedRanks> ranks_;
  std::unique_ptr<TcpStoreServer> server_;
};

}  // namespace testing
}  // namespace dtrain
