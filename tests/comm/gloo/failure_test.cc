// Failure paths of the Gloo backend with threads standing in for ranks:
// argument errors, bootstrap errors surfacing through createCommunicator, a
// late peer, a peer that never arrives, and the broken state afterwards.
#include <gtest/gtest.h>

#include "common/host.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "tests/comm/gloo/buffers.h"
#include "tests/comm/gloo/gloo_group.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using testing::contains;
using testing::errorIs;
using testing::errorText;
using testing::glooTestOptions;
using testing::runGlooGroup;
using testing::runOnRankThreads;
using Clock = std::chrono::steady_clock;

constexpr auto cpuBuf = testing::cpuBuffer;

TEST(GlooArgumentsTest, CudaBufferIsConfigErrorPointingAtNccl) {
  runGlooGroup(1, [](Communicator& comm, int) {
    float host[4] = {};
    Buffer device_buffer = cpuBuf(host, 4, DType::kFloat32);
    device_buffer.device = Device::cuda(0);
    const std::string expected = "gloo does not support CUDA buffers; use the nccl backend";
    try {
      comm.allreduce(device_buffer, device_buffer);
      ADD_FAILURE() << "expected ConfigError";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.message(), expected)) << e.message();
    }
    EXPECT_THROW(comm.broadcast(device_buffer), ConfigError);
    EXPECT_THROW(comm.allgather(cpuBuf(host, 4, DType::kFloat32), device_buffer), ConfigError);
  });
}

TEST(GlooArgumentsTest, SizeDtypeAndRankMismatchesAreConfigErrors) {
  runGlooGroup(2, [](Communicator& comm, int rank) {
    float a[8] = {};
    double d[8] = {};
    try {
      comm.allgather(cpuBuf(a, 4, DType::kFloat32), cpuBuf(a, 4, DType::kFloat32));
      ADD_FAILURE() << "expected ConfigError";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.message(), "recv has 4 elements; expected 8 elements (size() * send.count)"))
          << e.message();
    }
    EXPECT_THROW(comm.allreduce(cpuBuf(a, 4, DType::kFloat32), cpuBuf(a, 3, DType::kFloat32)), ConfigError);
    EXPECT_THROW(comm.allreduce(cpuBuf(a, 4, DType::kFloat32), cpuBuf(a + 2, 4, DType::kFloat32)), ConfigError);
    EXPECT_THROW(comm.allreduce(cpuBuf(a, 4, DType::kFloat32), cpuBuf(d, 4, DType::kFloat64)), ConfigError);
    EXPECT_THROW(comm.reduceScatter(cpuBuf(a, 5, DType::kFloat32), cpuBuf(a, 2, DType::kFloat32)), ConfigError);
    EXPECT_THROW(comm.broadcast(cpuBuf(a, 4, DType::kFloat32), {2}), ConfigError);
    EXPECT_THROW(comm.send(cpuBuf(a, 4, DType::kFloat32), rank), ConfigError);
    EXPECT_THROW(comm.recv(cpuBuf(a, 4, DType::kFloat32), -1), ConfigError);
    EXPECT_THROW(comm.sendRecv(cpuBuf(a, 4, DType::kFloat32), rank, cpuBuf(a, 4, DType::kFloat32), 1 - rank),
                 ConfigError);
  });
}

TEST(GlooBootstrapTest, RankThatNeverJoinsIsNamedInTimeoutError) {
  auto options = glooTestOptions();
  options.init_timeout = 1s;
  auto store = std::make_shared<HashStore>();
  auto errors = runOnRankThreads(2, [&](int rank) { createCommunicator("gloo", store, rank, 3, options); });
  for (const auto& error : errors) {
    EXPECT_TRUE(errorIs<TimeoutError>(error)) << errorText(error);
    EXPECT_TRUE(contains(errorText(error), "rank 2 never joined")) << errorText(error);
  }
}

TEST(GlooBootstrapTest, WorldSizeMismatchAndDuplicateRankAreConfigErrors) {
  auto store = std::make_shared<HashStore>();
  auto mismatch = runOnRankThreads(3, [&](int rank) {
    createCommunicator("gloo", store, rank, rank == 2 ? 4 : 3, glooTestOptions());
  });
  EXPECT_TRUE(contains(errorText(mismatch[2]), "WORLD_SIZE mismatch: this rank says 4, rank 0 says 3"))
      << errorText(mismatch[2]);
  for (const auto& error : mismatch) EXPECT_TRUE(errorIs<ConfigError>(error)) << errorText(error);

  auto duplicate_store = std::make_shared<HashStore>();
  auto duplicate = runOnRankThreads(3, [&](int index) {
    createCommunicator("gloo", duplicate_store, index == 2 ? 0 : index, 3, glooTestOptions());
  });
  for (const auto& error : duplicate) {
    EXPECT_TRUE(errorIs<ConfigError>(error)) << errorText(error);
    EXPECT_TRUE(contains(errorText(error), "rank 0 claimed twice")) << errorText(error);
  }
}

TEST(GlooWorkTest, WaitTimesOutWhileAPeerIsLateThenCompletes) {
  runGlooGroup(2, [](Communicator& comm, int rank) {
    int32_t value[1] = {rank + 1};
    if (rank == 1) std::this_thread::sleep_for(400ms);
    auto work = comm.allreduce(cpuBuf(value, 1, DType::kInt32), cpuBuf(value, 1, DType::kInt32));
    if (rank == 0) {
      try {
        work->wait(50ms);
        ADD_FAILURE() << "expected TimeoutError while rank 1 is late";
      } catch (const TimeoutError& e) {
        EXPECT_TRUE(contains(e.message(), "allreduce #1")) << e.message();
      }
      EXPECT_FALSE(work->isCompleted());
    }
    work->wait(30s);
    EXPECT_EQ(value[0], 3);
  });
}

// Rank 2 is alive but never calls the collective: the others time out, name
// it, and are broken afterwards.
TEST(GlooFailureTest, RankThatNeverArrivesIsNamedAndLaterCallsFailAtOnce) {
  std::mutex mutex;
  std::condition_variable cv;
  int finished = 0;
  auto store = std::make_shared<HashStore>();
  // Every rank keeps its communicator (and its progress record) alive until
  // both survivors have checked, so none of them looks dead to the other.
  auto wait_for_checks = [&] {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return finished == 2; });
  };
  auto errors = runOnRankThreads(3, [&](int rank) {
    auto comm = createCommunicator("gloo", store, rank, 3, glooTestOptions());
    if (rank == 2) return wait_for_checks();
    float data[16] = {};
    auto work = comm->allreduce(cpuBuf(data, 16, DType::kFloat32), cpuBuf(data, 16, DType::kFloat32),
                                {ReduceOp::kSum, 1s});
    try {
      work->wait(30s);
      ADD_FAILURE() << "rank " << rank << ": expected CommError";
    } catch (const CommError& e) {
      const std::string text = e.what();
      EXPECT_TRUE(contains(text, "gloo allreduce #1 failed")) << text;
      // Named with where it runs: "rank 2 on <host> (<address>) never arrived ...".
      EXPECT_TRUE(contains(text, "rank 2 on " + hostName() + " (")) << text;
      EXPECT_TRUE(contains(text, ") never arrived at allreduce #1")) << text;
      EXPECT_TRUE(contains(text, "[rank " + std::to_string(rank) + ",")) << text;
      EXPECT_FALSE(contains(text, "stopped publishing")) << text;
    }
    const auto start = Clock::now();
    try {
      comm->barrier()->wait(30s);
      ADD_FAILURE() << "rank " << rank << ": a broken communicator ran a barrier";
    } catch (const CommError& e) {
      EXPECT_TRUE(contains(e.message(), "gloo barrier #2 was not run: the communicator is broken"))
          << e.message();
      EXPECT_TRUE(contains(e.message(), ") never arrived at allreduce #1")) << e.message();
    }
    EXPECT_LT(Clock::now() - start, 1s);
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++finished;
    }
    cv.notify_all();
    wait_for_checks();
  });
  for (const auto& error : errors) EXPECT_EQ(error, nullptr) << errorText(error);
}

}  // namespace
}  // namespace dtrain
