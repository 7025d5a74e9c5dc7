// `dtrain train` stopped by a signal loses no work: the step in flight
// ends, every rank stops after the same step and writes its checkpoint,
// the process exits 75, and `--resume auto` goes on to the bits of a run
// that was never stopped. Real processes on Gloo under `dtrain launch`
// (the launcher forwarding the signal, or a signal reaching one worker
// only) and alone (SIGINT, as Ctrl-C).
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"
#include "train_runs.h"

namespace dtrain {
namespace {

using testing::checkpointOf;
using testing::contains;
using testing::dtrainBin;
using testing::expectSameState;
using testing::kTinyGptRun;
using testing::launchTrain;
using testing::runCommand;
using testing::TempDir;

constexpr int kSteps = 60;
const std::string kRun = kTinyGptRun + "--optimizer adamw --lr 3e-3 --warmup-steps 2 --max-steps " +
                         std::to_string(kSteps) + " --checkpoint-every 1000 --resume auto ";

// The step a run said it stopped after ("stopped by ... after step N"), or -1.
int stoppedAfter(const std::string& output) {
  static const std::regex line("stopped by [^\n]* after step ([0-9]+) of ([0-9]+); checkpoint of step ([0-9]+)");
  std::smatch m;
  if (!std::regex_search(output, m, line)) return -1;
  if (m[1] != m[3]) return -2;
  return std::stoi(m[1]);
}

class StopSignalTest : public ::testing::Test {
 protected:
  // The uninterrupted run every stopped one is compared with (once).
  static const TempDir& clean() {
    static TempDir dir("dtrain-stop-clean");
    static const bool ran = [] {
      auto r = runCommand(launchTrain(2, kRun + "--checkpoint-dir " + dir.path()), 300);
      EXPECT_EQ(r.exit_code, 0) << r.output;
      return true;
    }();
    (void)ran;
    return dir;
  }

  // Resumes the stopped run in `dir` to the end and compares it with the
  // uninterrupted one, bit for bit.
  void resumeAndCompare(const TempDir& dir, int stopped_at) {
    auto r = runCommand(launchTrain(2, kRun + "--checkpoint-dir " + dir.path()), 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "resumed at step " + std::to_string(stopped_at))) << r.output;
    expectSameState(checkpointOf(clean(), kSteps), checkpointOf(dir, kSteps));
  }
};

// SIGUSR1 to the launcher (Slurm's time-limit warning reaches it so): it
// forwards the signal and waits --shutdown-timeout; every rank stops after
// one step, checkpoints it, and exits 75; the launcher exits 128 + 10.
TEST_F(StopSignalTest, SignalToTheLauncherStopsEveryRankAfterOneStepWithACheckpoint) {
  TempDir dir("dtrain-stop-launcher");
  auto r = runCommand("DTRAIN_FAULT_SIGNAL_AT=0:4:USR1:parent " +
                          launchTrain(2, kRun + "--checkpoint-dir " + dir.path(), "--shutdown-timeout 60"),
                      300);
  EXPECT_EQ(r.exit_code, 128 + 10) << r.output;
  EXPECT_TRUE(contains(r.output, "received SIGUSR1; forwarding it to the workers, which have 60 s")) << r.output;
  const int at = stoppedAfter(r.output);
  ASSERT_GE(at, 4) << r.output;
  ASSERT_LT(at, kSteps) << r.output;
  EXPECT_TRUE(contains(r.output, "stopped by SIGUSR1 after step")) << r.output;
  EXPECT_TRUE(contains(r.output, "exit 75")) << r.output;
  EXPECT_FALSE(contains(r.output, "SIGKILL")) << r.output;
  resumeAndCompare(dir, at);
}

// A signal that reaches one worker only (rank 1 signals itself after step
// 5): the ranks agree to stop after step 5 all the same; the launcher sees
// every worker exit 75 and exits 75 without restarting them.
TEST_F(StopSignalTest, SignalToOneWorkerStopsEveryRankAtTheSameStep) {
  TempDir dir("dtrain-stop-worker");
  auto r = runCommand("DTRAIN_FAULT_SIGNAL_AT=1:5:TERM " +
                          launchTrain(2, kRun + "--checkpoint-dir " + dir.path(), "--max-restarts 2"),
                      300);
  EXPECT_EQ(r.exit_code, 75) << r.output;
  EXPECT_EQ(stoppedAfter(r.output), 5) << r.output;
  EXPECT_TRUE(contains(r.output, "the workers stopped after writing a checkpoint (exit 75); not restarting them"))
      << r.output;
  EXPECT_FALSE(contains(r.output, "restart 1/")) << r.output;
  resumeAndCompare(dir, 5);
}

// Alone, Ctrl-C (SIGINT): the same stop, exit 75; without a checkpoint
// directory nothing can be kept and it exits 128 + 2.
TEST_F(StopSignalTest, SigintStopsASingleProcessWithACheckpoint) {
  TempDir dir("dtrain-stop-alone");
  const std::string solo = "env -u RANK -u WORLD_SIZE DTRAIN_FAULT_SIGNAL_AT=0:3:INT " + dtrainBin() +
                           " train --cache-dir " + testing::corpusCacheDir() + " " + kRun;
  auto r = runCommand(solo + "--checkpoint-dir " + dir.path() + " 2>&1", 300);
  EXPECT_EQ(r.exit_code, 75) << r.output;
  EXPECT_EQ(stoppedAfter(r.output), 3) << r.output;
  auto none = runCommand(std::regex_replace(solo, std::regex("--resume auto"), "") + " 2>&1", 300);
  EXPECT_EQ(none.exit_code, 128 + 2) << none.output;
  EXPECT_TRUE(contains(none.output, "stopped by SIGINT after step 3 of 60; no --checkpoint-dir, so nothing was saved"))
      << none.output;
}

// A stop signal before the first step has nothing to save: rank 0 of two,
// waiting for a rank 1 that never comes, ends at once on SIGTERM with
// 128 + 15 and says so (it used to wait on, ignoring the signal). Meanwhile
// the store it hosts listens on MASTER_ADDR (127.0.0.1), not on every
// address of the host.
TEST_F(StopSignalTest, SigtermWhileWaitingForPeersEndsAtOnce) {
  const std::string port = std::to_string(testing::freePort());
  auto r = runCommand("env RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                          port + " " + dtrainBin() + " train --model mlp --progress none --max-steps 5 2>&1 & pid=$!; "
                          "sleep 3; kill -0 $pid || echo 'ended before the signal'; "
                          "echo \"listening: $(ss -Hltn '( sport = :" + port + " )' | awk '{print $4}')\"; "
                          "kill -TERM $pid; "
                          "t0=$(date +%s%N); wait $pid; rc=$?; "
                          "echo \"rc=$rc after=$(( ($(date +%s%N) - t0) / 1000000 )) ms\"",
                      60);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("rc=([0-9]+) after=([0-9]+) ms"))) << r.output;
  EXPECT_FALSE(contains(r.output, "ended before the signal")) << r.output;
  EXPECT_EQ(m[1], "143") << r.output;
  EXPECT_LT(std::stoi(m[2]), 2000) << r.output;
  EXPECT_TRUE(contains(r.output, "dtrain train: stopped by SIGTERM before the first step (nothing to save); exit 143"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "listening: 127.0.0.1:" + port + "\n")) << r.output;
}

}  // namespace
}  // namespace dtrain
