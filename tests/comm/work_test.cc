#include "comm/work.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/error.h"
#include "tests/comm/rank_threads.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using testing::contains;

TEST(WorkTest, WaitTimesOutNamingOperationAndSequence) {
  Work work("allreduce", 7);
  EXPECT_FALSE(work.isCompleted());
  const auto start = std::chrono::steady_clock::now();
  try {
    work.wait(50ms);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.message(), "allreduce #7")) << e.message();
    EXPECT_TRUE(contains(e.message(), "50 ms")) << e.message();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
  EXPECT_FALSE(work.isCompleted());
}

TEST(WorkTest, CompletionFromAnotherThreadWakesEveryWaiter) {
  Work work("broadcast", 1);
  std::thread completer([&] {
    std::this_thread::sleep_for(20ms);
    work.markCompleted();
  });
  std::thread second_waiter([&] { EXPECT_NO_THROW(work.wait(10s)); });
  EXPECT_NO_THROW(work.wait(10s));
  completer.join();
  second_waiter.join();
  EXPECT_TRUE(work.isCompleted());
  EXPECT_EQ(work.exception(), nullptr);
  EXPECT_NO_THROW(work.wait(0ms));  // waiting again on a completed Work returns at once
}

TEST(WorkTest, FailureIsStoredAndRethrownToEveryWait) {
  Work work("barrier", 3);
  work.markFailed(std::make_exception_ptr(CommError("rank 2 died")));
  EXPECT_TRUE(work.isCompleted());
  ASSERT_NE(work.exception(), nullptr);
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      work.wait(1s);
      FAIL() << "expected CommError";
    } catch (const CommError& e) {
      EXPECT_EQ(e.message(), "rank 2 died");
    }
  }
  EXPECT_EQ(work.opName(), "barrier");
  EXPECT_EQ(work.seq(), 3u);
}

}  // namespace
}  // namespace dtrain
