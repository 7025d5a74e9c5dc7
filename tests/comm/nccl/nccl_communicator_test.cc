// Tests of the NCCL backend on real GPUs, one forked process per GPU (up to
// 4). Skipped, not failed, where fewer than two GPUs can be used, so CPU CI
// builds and runs this binary.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "collective_cases.h"
#include "comm/nccl/communicator.h"
#include "common/error.h"
#include "device_buffer.h"
#include "rank_processes.h"
#include "stream_cases.h"
#include "store/store.h"

namespace dtrain::testing {
namespace {

constexpr int kMaxRanks = 4;

int usableGpus() { return std::min(cudaDeviceCountFromChild(), kMaxRanks); }

#define SKIP_WITHOUT_TWO_GPUS()                                                           \
  do {                                                                                    \
    setNcclTestEnvironment();                                                             \
    if (usableGpus() < 2) GTEST_SKIP() << "needs 2 or more CUDA devices; this machine has " \
                                       << cudaDeviceCountFromChild();                     \
  } while (0)

CommunicatorOptions optionsFor(int rank, const std::string& prefix) {
  CommunicatorOptions options;
  options.store_prefix = prefix;
  options.device = rank;  // one GPU per rank, as `dtrain launch` assigns LOCAL_RANK
  options.init_timeout = std::chrono::seconds(60);
  options.progress_interval = std::chrono::milliseconds(100);
  return options;
}

void expectAllExitedCleanly(const std::vector<int>& statuses, const std::string& what) {
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    EXPECT_TRUE(exitedCleanly(statuses[rank]))
        << what << ": rank " << rank << " " << describeWaitStatus(statuses[rank]) << " (its stderr says why)";
  }
}

// The world sizes to try: 2, and every usable GPU when that is more.
std::vector<int> worldSizes() {
  std::vector<int> sizes{2};
  if (usableGpus() > 2) sizes.push_back(usableGpus());
  return sizes;
}

TEST(NcclCommunicatorTest, EveryOperationAndDTypeMatchesTheHostReference) {
  SKIP_WITHOUT_TWO_GPUS();
  for (int world : worldSizes()) {
    RankProcesses ranks(world, [world](int rank, std::shared_ptr<Store> store) {
      auto comm = createNcclCommunicator(store, rank, world, optionsFor(rank, "comm/every-op"));
      checkEveryOperation(*comm, rank);
    });
    expectAllExitedCleanly(ranks.waitAll(std::chrono::seconds(240)), "world " + std::to_string(world));
  }
}

// Also checks that destroying a communicator with work outstanding flushes
// that work.
TEST(NcclCommunicatorTest, CallerStreamIsOrderedAfterTheCollectiveWithoutHostWait) {
  SKIP_WITHOUT_TWO_GPUS();
  for (int world : worldSizes()) {
    RankProcesses ranks(world, [world](int rank, std::shared_ptr<Store> store) {
      auto comm = createNcclCommunicator(store, rank, world, optionsFor(rank, "comm/stream-order"));
      checkCallerStreamOrdering(*comm, rank);
      // Destroying the communicator with work outstanding flushes it: the
      // Work completes rather than failing or hanging.
      DeviceBuffer buffer(DType::kFloat32, 1024, rank);
      buffer.upload(std::vector<double>(1024, 2.0));
      std::shared_ptr<Work> outstanding = comm->allreduce(buffer.all(), buffer.all());
      comm.reset();
      expectThat(outstanding->isCompleted(), "a Work outstanding at destruction is not completed");
      outstanding->wait(std::chrono::seconds(1));
      for (double value : buffer.download()) {
        expectThat(value == 2.0 * world, "allreduce flushed by destruction gave " + std::to_string(value));
      }
    });
    expectAllExitedCleanly(ranks.waitAll(std::chrono::seconds(120)), "world " + std::to_string(world));
  }
}

TEST(NcclCommunicatorTest, CollectiveCapturedIntoACudaGraphReplays) {
  SKIP_WITHOUT_TWO_GPUS();
  for (int world : worldSizes()) {
    RankProcesses ranks(world, [world](int rank, std::shared_ptr<Store> store) {
      auto comm = createNcclCommunicator(store, rank, world, optionsFor(rank, "comm/graph"));
      checkGraphCapture(*comm, rank);
    });
    expectAllExitedCleanly(ranks.waitAll(std::chrono::seconds(120)), "world " + std::to_string(world));
  }
}

// One rank SIGKILLs itself in the middle of a loop of allreduces. Every
// survivor must get a CommError within kFailureBound of the kill, naming the
// collective and the dead rank, and its communicator must then refuse work
// at once.
TEST(NcclCommunicatorTest, KilledRankFailsSurvivorsWithinTheTimeoutNamingIt) {
  SKIP_WITHOUT_TWO_GPUS();
  const int world = usableGpus();
  const int victim = world - 1;
  constexpr int kIterationsBeforeKill = 20;
  constexpr auto kCollectiveTimeout = std::chrono::seconds(8);
  constexpr auto kFailureBound = std::chrono::seconds(20);
  RankProcesses ranks(world, [=](int rank, std::shared_ptr<Store> store) {
    auto comm = createNcclCommunicator(store, rank, world, optionsFor(rank, "comm/kill"));
    DeviceBuffer buffer(DType::kFloat32, size_t{1} << 20, rank);
    buffer.upload(std::vector<double>(size_t{1} << 20, 1.0));
    AllreduceOptions options;
    options.timeout = kCollectiveTimeout;
    for (int i = 0; i < 10000; ++i) {
      if (rank == victim && i == kIterationsBeforeKill) {
        store->set("kill/killed_at_ns", std::to_string(monotonicNanos()));
        kill(getpid(), SIGKILL);
      }
      try {
        comm->allreduce(buffer.all(), buffer.all(), options)->wait(std::chrono::seconds(120));
      } catch (const CommError& e) {
        const double since_kill_s = (monotonicNanos() - std::stoll(store->get("kill/killed_at_ns"))) / 1e9;
        const std::string message = e.message();
        expectThat(since_kill_s < std::chrono::duration<double>(kFailureBound).count(),
                   "the failure came " + std::to_string(since_kill_s) + " s after the kill: " + message);
        expectThat(i >= kIterationsBeforeKill, "failed before the kill, at iteration " + std::to_string(i) + ": " +
                                                   message);
        expectThat(message.find("allreduce #") != std::string::npos, "the error names no allreduce: " + message);
        expectThat(message.find("rank " + std::to_string(victim)) != std::string::npos,
                   "the error does not name the killed rank " + std::to_string(victim) + ": " + message);
        std::fprintf(stderr, "rank %d got the expected error %.1f s after the kill: %s\n", rank, since_kill_s,
                     message.c_str());
        const auto before = std::chrono::steady_clock::now();
        try {
          comm->allreduce(buffer.all(), buffer.all(), options);
        } catch (const CommError& again) {
          expectThat(std::chrono::steady_clock::now() - before < std::chrono::seconds(1),
                     "a call on the broken communicator did not fail at once");
          expectThat(again.message().find("broken") != std::string::npos,
                     "a later call's error does not say the communicator is broken: " + again.message());
          return;
        }
        throw std::runtime_error("a call on the broken communicator did not throw");
      }
    }
    throw std::runtime_error("the allreduce loop never failed although rank " + std::to_string(victim) + " died");
  });
  const std::vector<int> statuses = ranks.waitAll(std::chrono::seconds(180));
  for (int rank = 0; rank < world; ++rank) {
    if (rank == victim) {
      EXPECT_TRUE(WIFSIGNALED(statuses[rank]) && WTERMSIG(statuses[rank]) == SIGKILL)
          << "the victim, rank " << rank << ": " << describeWaitStatus(statuses[rank]);
    } else {
      EXPECT_TRUE(exitedCleanly(statuses[rank]))
          << "survivor rank " << rank << ": " << describeWaitStatus(statuses[rank]) << " (its stderr says why)";
    }
  }
}

// A rank fails (an exception) while its peer waits on a transfer from it.
// The failing rank's communicator, destroyed as the error unwinds, aborts at
// once instead of finalizing, which would wait for the peer up to the
// teardown timeout (here 60 s); the peer's receive fails by its own timeout.
TEST(NcclCommunicatorTest, ACommunicatorDestroyedByAnErrorAbortsWithoutWaitingForItsPeer) {
  SKIP_WITHOUT_TWO_GPUS();
  constexpr auto kReceiveTimeout = std::chrono::seconds(8);
  RankProcesses ranks(2, [=](int rank, std::shared_ptr<Store> store) {
    DeviceBuffer buffer(DType::kFloat32, size_t{1} << 20, rank);
    SendRecvOptions options;
    options.timeout = kReceiveTimeout;
    if (rank == 0) {
      auto comm = createNcclCommunicator(store, rank, 2, optionsFor(rank, "comm/unwind"));
      comm->recv(buffer.all(), 1, options)->wait(std::chrono::seconds(60));  // the first arrives
      try {
        comm->recv(buffer.all(), 1, options)->wait(std::chrono::seconds(60));  // the second never does
      } catch (const CommError&) {
        return;
      }
      throw std::runtime_error("a receive from the failed rank did not fail");
    }
    int64_t thrown_at = 0;
    try {
      auto comm = createNcclCommunicator(store, rank, 2, optionsFor(rank, "comm/unwind"));
      comm->send(buffer.all(), 0, options)->wait(std::chrono::seconds(60));
      thrown_at = monotonicNanos();
      throw std::runtime_error("this stage failed");
    } catch (const std::runtime_error&) {
      const double unwound_s = (monotonicNanos() - thrown_at) / 1e9;
      expectThat(unwound_s < 5, "destroying the communicator while unwinding took " + std::to_string(unwound_s) +
                                    " s (it waited for its peer)");
    }
  });
  expectAllExitedCleanly(ranks.waitAll(std::chrono::seconds(120)), "an error unwinding past a communicator");
}

}  // namespace
}  // namespace dtrain::testing
