// Fork-per-rank groups over a real TcpStoreServer in the test process: the
// collectives across processes, a rank that never joins, and a rank killed
// with SIGKILL in the middle of an allreduce loop.
#include <gtest/gtest.h>

#include "common/host.h"
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "store/tcp_store.h"
#include "tests/comm/gloo/buffers.h"
#include "tests/support/forked_child.h"
#include "tests/comm/rank_threads.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using testing::contains;
using testing::cpuBuffer;
using testing::filledBuffer;
using testing::firstMismatch;
using testing::ChildSide;
using testing::ForkedRanks;
using Clock = std::chrono::steady_clock;

constexpr int kWorldSize = 4;
constexpr Milliseconds kCollectiveTimeout{10s};

class GlooForkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TcpStoreServerOptions options;
    options.bind_address = "127.0.0.1";
    server_ = std::make_unique<TcpStoreServer>(options);
    port_ = server_->port();
  }

  // In a child: this rank's communicator over a TcpStore client.
  std::unique_ptr<Communicator> join(const ChildSide& child, Milliseconds init_timeout = 60s) const {
    setProcessRank(child.rank);
    TcpStoreClientOptions client;
    client.host = "127.0.0.1";
    client.port = port_;
    client.connect_timeout = 10s;
    CommunicatorOptions options;
    options.store_prefix = "fork-test";
    options.init_timeout = init_timeout;
    options.progress_interval = 100ms;
    return createCommunicator("gloo", std::make_shared<TcpStore>(client), child.rank, kWorldSize, options);
  }

  std::unique_ptr<TcpStoreServer> server_;
  uint16_t port_ = 0;
};

// Reports "" when a collective gave the expected result, else what differed.
std::string checkCollectives(Communicator& comm, int rank) {
  std::string problems;
  auto note = [&](const std::string& what, const std::string& mismatch) {
    if (!mismatch.empty()) problems += what + ": " + mismatch + "; ";
  };
  constexpr size_t kCount = 1000;
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kInt32}) {
    auto data = filledBuffer(dtype, kCount, [&](size_t i) { return (rank + i) % 5; });
    comm.allreduce(cpuBuffer(data.data(), kCount, dtype), cpuBuffer(data.data(), kCount, dtype))->wait(60s);
    note(std::string("allreduce sum ") + dtypeName(dtype), firstMismatch(data.data(), dtype, kCount, [](size_t i) {
           double sum = 0;
           for (int r = 0; r < kWorldSize; ++r) sum += (r + i) % 5;
           return sum;
         }));
  }
  auto mine = filledBuffer(DType::kInt64, 7, [&](size_t i) { return rank * 100 + i; });
  std::vector<char> all(7 * kWorldSize * sizeof(int64_t));
  comm.allgather(cpuBuffer(mine.data(), 7, DType::kInt64), cpuBuffer(all.data(), 7 * kWorldSize, DType::kInt64))
      ->wait(60s);
  note("allgather int64", firstMismatch(all.data(), DType::kInt64, 7 * kWorldSize,
                                        [](size_t j) { return (j / 7) * 100 + j % 7; }));
  auto shared = filledBuffer(DType::kBFloat16, 33, [&](size_t i) { return rank == 2 ? i % 9 : 0; });
  comm.broadcast(cpuBuffer(shared.data(), 33, DType::kBFloat16), {2})->wait(60s);
  note("broadcast bfloat16", firstMismatch(shared.data(), DType::kBFloat16, 33, [](size_t i) { return i % 9; }));
  auto scattered = filledBuffer(DType::kUInt8, 2 * kWorldSize, [&](size_t j) { return (rank * 3 + j) % 7; });
  uint8_t chunk[2];
  comm.reduceScatter(cpuBuffer(scattered.data(), 2 * kWorldSize, DType::kUInt8), cpuBuffer(chunk, 2, DType::kUInt8),
                     {ReduceOp::kMax})
      ->wait(60s);
  note("reduce_scatter max uint8", firstMismatch(chunk, DType::kUInt8, 2, [&](size_t i) {
         double best = 0;
         for (int r = 0; r < kWorldSize; ++r) best = std::max<double>(best, (r * 3 + rank * 2 + i) % 7);
         return best;
       }));
  comm.barrier()->wait(60s);
  return problems;
}

TEST_F(GlooForkTest, CollectivesAcrossFourProcesses) {
  ForkedRanks ranks(kWorldSize, [&](const ChildSide& child) {
    auto comm = join(child);
    const std::string problems = checkCollectives(*comm, child.rank);
    child.report(problems.empty() ? "ok" : problems);
    return problems.empty() ? 0 : 1;
  });
  const auto deadline = Clock::now() + 120s;
  for (int rank = 0; rank < kWorldSize; ++rank) {
    EXPECT_EQ(ranks[rank].readReport(deadline), "ok") << "rank " << rank;
    const int status = ranks[rank].reap();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << rank << " status " << status;
  }
}

TEST_F(GlooForkTest, RankThatNeverJoinsIsNamedByTheOthers) {
  ForkedRanks ranks(kWorldSize - 1, [&](const ChildSide& child) {
    try {
      join(child, 2s);
      child.report("joined a group that lacks rank 3");
      return 1;
    } catch (const TimeoutError& e) {
      child.report(e.what());
      return 0;
    }
  });
  const auto deadline = Clock::now() + 60s;
  for (int rank = 0; rank < kWorldSize - 1; ++rank) {
    const std::string report = ranks[rank].readReport(deadline);
    EXPECT_TRUE(contains(report, "rank 3 never joined")) << "rank " << rank << ": " << report;
    const int status = ranks[rank].reap();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << rank << ": " << report;
  }
}

// Every rank loops a 4 MiB allreduce; once all are in the loop, rank 2 is
// killed. Every survivor must fail within the collective timeout with a
// CommError that names rank 2.
TEST_F(GlooForkTest, KilledRankIsNamedByEverySurvivorWithinTheTimeout) {
  constexpr int kVictim = 2;
  constexpr size_t kCount = 1u << 20;
  ForkedRanks ranks(kWorldSize, [&](const ChildSide& child) {
    auto comm = join(child);
    std::vector<float> data(kCount, 0.0f);
    const Buffer buffer = cpuBuffer(data.data(), kCount, DType::kFloat32);
    child.report("R");  // in the loop from here on
    int code = 1;
    try {
      while (true) comm->allreduce(buffer, buffer, {ReduceOp::kSum, kCollectiveTimeout})->wait(60s);
    } catch (const CommError& e) {
      child.report(std::string("|") + e.what());
      code = 0;
    } catch (const std::exception& e) {
      child.report(std::string("|not a CommError: ") + e.what());
    }
    ::close(child.report_fd);
    child.waitForRelease();  // stay alive: a survivor must not look dead to the others
    return code;
  });

  const auto ready_deadline = Clock::now() + 60s;
  for (int rank = 0; rank < kWorldSize; ++rank) {
    ASSERT_EQ(ranks[rank].readReport(ready_deadline, 1), "R") << "rank " << rank << " never got going";
  }
  std::this_thread::sleep_for(300ms);  // a few allreduces in
  ASSERT_EQ(::kill(ranks.pid(kVictim), SIGKILL), 0);
  const auto killed_at = Clock::now();

  for (int rank = 0; rank < kWorldSize; ++rank) {
    if (rank == kVictim) continue;
    const std::string report = ranks[rank].readReport(killed_at + 2 * kCollectiveTimeout);
    const auto reported_after = Clock::now() - killed_at;
    EXPECT_LT(reported_after, kCollectiveTimeout) << "rank " << rank << " took too long: " << report;
    EXPECT_TRUE(contains(report, "|CommError")) << "rank " << rank << ": " << report;
    EXPECT_TRUE(contains(report, "gloo allreduce #")) << "rank " << rank << ": " << report;
    EXPECT_TRUE(contains(report, "rank 2 on " + hostName() + " (")) << "rank " << rank << ": " << report;
    EXPECT_TRUE(contains(report, ") stopped publishing progress")) << "rank " << rank << ": " << report;
  }
  ranks.releaseAll();
  for (int rank = 0; rank < kWorldSize; ++rank) {
    const int status = ranks[rank].reap();
    if (rank == kVictim) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << rank << " status " << status;
    }
  }
}

}  // namespace
}  // namespace dtrain
