// WorkerGroup stop(), forward() and the order of failures, with real
// processes (and their grandchildren).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "helpers/worker_test_util.h"
#include "launch/worker_group.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using testing::makeTempDir;
using testing::pollUntilDone;
using testing::readFile;
using testing::shellSpec;
using testing::waitFirstLine;
using testing::waitGone;
using testing::workerEnvs;

class WorkerGroupStopTest : public ::testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string stdoutLog(int local_rank) const {
    return dir_ + "/attempt_0/" + std::to_string(local_rank) + "/stdout.log";
  }
  // Reads the pid each worker printed as its first line.
  std::vector<pid_t> printedPids(int workers) const {
    std::vector<pid_t> pids;
    for (int i = 0; i < workers; ++i) {
      std::string line = waitFirstLine(stdoutLog(i), 5s);
      pids.push_back(line.empty() ? -1 : static_cast<pid_t>(std::stol(line)));
    }
    return pids;
  }
  std::string dir_ = makeTempDir();
};

TEST_F(WorkerGroupStopTest, SigkillsWorkersThatIgnoreSigtermAndLeavesNoOrphans) {
  // The shell and its background sleep (a grandchild of ours) ignore TERM.
  auto spec = shellSpec("trap '' TERM; sleep 60 & echo $!; wait");
  spec.log_dir = dir_;
  spec.local_ranks_filter = std::set<int>{};  // files only: keep the test output clean
  spec.shutdown_timeout = 300ms;
  WorkerGroup group(spec, workerEnvs(2));
  group.start();
  const std::vector<pid_t> workers = group.livePids();
  const std::vector<pid_t> grandchildren = printedPids(2);
  ASSERT_EQ(workers.size(), 2u);
  for (pid_t pid : grandchildren) ASSERT_GT(pid, 0);
  EXPECT_EQ(group.poll(), GroupState::kRunning);

  const auto begin = std::chrono::steady_clock::now();
  group.stop();
  const auto took = std::chrono::steady_clock::now() - begin;
  EXPECT_GE(took, 290ms) << "SIGKILL came before shutdown_timeout";
  EXPECT_LT(took, 1000ms);
  EXPECT_TRUE(group.livePids().empty());
  for (pid_t pid : workers) {
    errno = 0;
    EXPECT_EQ(::kill(pid, 0), -1) << "worker " << pid << " not reaped";
    EXPECT_EQ(errno, ESRCH);
  }
  for (pid_t pid : grandchildren) EXPECT_TRUE(waitGone(pid, 1s)) << "grandchild sleep " << pid << " survived";
  // Workers that stop() terminates are not failures.
  EXPECT_TRUE(group.failures().empty());
  group.stop();  // a no-op
}

TEST_F(WorkerGroupStopTest, SigtermIsEnoughForWorkersThatHonourIt) {
  auto spec = shellSpec("exec sleep 60");
  spec.shutdown_timeout = 10s;
  WorkerGroup group(spec, workerEnvs(3));
  group.start();
  const auto pids = group.livePids();
  const auto begin = std::chrono::steady_clock::now();
  group.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 1000ms);
  for (pid_t pid : pids) EXPECT_FALSE(processAlive(pid));
}

TEST_F(WorkerGroupStopTest, KillsWhatAnExitedWorkerLeftBehind) {
  // The worker exits 0 at once; its background sleep keeps the stdout pipe.
  auto spec = shellSpec("sleep 60 & echo $!; exit 0");
  spec.log_dir = dir_;
  spec.local_ranks_filter = std::set<int>{};
  spec.shutdown_timeout = 2s;
  WorkerGroup group(spec, workerEnvs(1));
  group.start();
  const pid_t grandchild = printedPids(1)[0];
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(pollUntilDone(group, 5s), GroupState::kSucceeded);
  EXPECT_TRUE(processAlive(grandchild));
  const auto begin = std::chrono::steady_clock::now();
  group.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 1500ms);
  EXPECT_TRUE(waitGone(grandchild, 1s));
}

TEST_F(WorkerGroupStopTest, DestructorStopsTheGroup) {
  std::vector<pid_t> pids;
  {
    WorkerGroup group(shellSpec("exec sleep 60"), workerEnvs(2));
    group.start();
    pids = group.livePids();
  }
  ASSERT_EQ(pids.size(), 2u);
  for (pid_t pid : pids) EXPECT_FALSE(processAlive(pid));
}

TEST_F(WorkerGroupStopTest, ForwardSendsTheSignalToEveryWorkerGroup) {
  auto spec = shellSpec("trap 'echo got USR1; exit 7' USR1; echo ready; while :; do sleep 0.05; done");
  spec.log_dir = dir_;
  spec.local_ranks_filter = std::set<int>{};
  WorkerGroup group(spec, workerEnvs(2));
  group.start();
  for (int i = 0; i < 2; ++i) ASSERT_EQ(waitFirstLine(stdoutLog(i), 5s), "ready");
  group.forward(SIGUSR1);
  EXPECT_EQ(pollUntilDone(group, 5s), GroupState::kFailed);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!group.livePids().empty() && std::chrono::steady_clock::now() < deadline) {
    group.poll();
    std::this_thread::sleep_for(5ms);
  }
  const auto failures = group.failures();
  ASSERT_EQ(failures.size(), 2u);
  for (const auto& failure : failures) EXPECT_EQ(failure.exit_code, 7);
  group.stop();
  for (int i = 0; i < 2; ++i) EXPECT_EQ(readFile(stdoutLog(i)), "ready\ngot USR1\n");
}

// A forwarded signal (as a trainer gets SIGUSR1 or SIGINT) leaves the
// workers shutdown_timeout to save and exit; SIGTERM does not follow it at
// once (it did: a worker needing 1 s to save was killed after 0.04 s).
TEST_F(WorkerGroupStopTest, AForwardedSignalGivesTheWorkersTheShutdownTimeoutBeforeSigterm) {
  auto spec = shellSpec(
      "trap 'echo saving; sleep 1; echo saved; exit 75' USR1; trap 'echo got TERM; exit 9' TERM; echo ready; "
      "while :; do sleep 0.05; done");
  spec.log_dir = dir_;
  spec.local_ranks_filter = std::set<int>{};
  spec.shutdown_timeout = 5s;
  WorkerGroup group(spec, workerEnvs(2));
  group.start();
  for (int i = 0; i < 2; ++i) ASSERT_EQ(waitFirstLine(stdoutLog(i), 5s), "ready");
  const auto begin = std::chrono::steady_clock::now();
  group.stop(SIGUSR1);
  const auto took = std::chrono::steady_clock::now() - begin;
  EXPECT_GE(took, 900ms);
  EXPECT_LT(took, 4s) << "stop() waited past the workers' exit";
  for (int i = 0; i < 2; ++i) EXPECT_EQ(readFile(stdoutLog(i)), "ready\nsaving\nsaved\n");
  EXPECT_TRUE(group.failures().empty());
}

// A worker that does not exit within shutdown_timeout of the forwarded
// signal gets SIGTERM, then (ignoring that too) SIGKILL.
TEST_F(WorkerGroupStopTest, AWorkerThatOutlivesTheForwardedSignalGetsSigtermThenSigkill) {
  auto spec = shellSpec("trap 'echo got USR1' USR1; trap 'echo got TERM' TERM; echo ready; "
                        "while :; do sleep 0.05; done");
  spec.log_dir = dir_;
  spec.local_ranks_filter = std::set<int>{};
  spec.shutdown_timeout = 400ms;
  WorkerGroup group(spec, workerEnvs(1));
  group.start();
  ASSERT_EQ(waitFirstLine(stdoutLog(0), 5s), "ready");
  const auto begin = std::chrono::steady_clock::now();
  group.stop(SIGUSR1);
  const auto took = std::chrono::steady_clock::now() - begin;
  EXPECT_GE(took, 750ms) << "shutdown_timeout after USR1, then as long again after TERM";
  EXPECT_LT(took, 3s);
  EXPECT_TRUE(group.livePids().empty());
  EXPECT_EQ(readFile(stdoutLog(0)), "ready\ngot USR1\ngot TERM\n");
}

// Exit 75 (stopped after a checkpoint) is no failure: a group whose
// workers all exit 0 or 75 is stopped, not failed, and nothing is killed
// while the others are still saving.
TEST_F(WorkerGroupStopTest, WorkersThatExitWithStoppedAfterCheckpointAreStoppedNotFailed) {
  auto spec = shellSpec("if [ \"$LOCAL_RANK\" = 0 ]; then exit 75; fi; sleep 0.5; echo saved; exit 75");
  spec.log_dir = dir_;
  spec.local_ranks_filter = std::set<int>{};
  WorkerGroup group(spec, workerEnvs(2));
  group.start();
  EXPECT_EQ(pollUntilDone(group, 5s), GroupState::kStopped);
  // The log router may write the worker's last line just after its exit.
  EXPECT_EQ(waitFirstLine(stdoutLog(1), 5s), "saved");
  EXPECT_TRUE(group.failures().empty());
}

TEST_F(WorkerGroupStopTest, FailuresAreInTheOrderTheyHappened) {
  auto spec = shellSpec("if [ \"$LOCAL_RANK\" = 0 ]; then sleep 0.4; exit 5; fi; exit 4");
  WorkerGroup group(spec, workerEnvs(2));
  group.start();
  EXPECT_EQ(pollUntilDone(group, 5s), GroupState::kFailed);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!group.livePids().empty() && std::chrono::steady_clock::now() < deadline) {
    group.poll();
    std::this_thread::sleep_for(5ms);
  }
  const auto failures = group.failures();
  ASSERT_EQ(failures.size(), 2u);
  EXPECT_EQ(failures[0].local_rank, 1);
  EXPECT_EQ(failures[0].exit_code, 4);
  EXPECT_EQ(failures[1].local_rank, 0);
  EXPECT_EQ(failures[1].exit_code, 5);
  EXPECT_LE(failures[0].time, failures[1].time);
  const std::string text = formatFailureSummary(failures, "testhost", 0);
  EXPECT_NE(text.find("exit code : 4"), std::string::npos) << text;
  EXPECT_LT(text.find("exit code : 4"), text.find("Other failures:")) << text;
  EXPECT_GT(text.find("exit code : 5"), text.find("Other failures:")) << text;
}

}  // namespace
}  // namespace dtrain
