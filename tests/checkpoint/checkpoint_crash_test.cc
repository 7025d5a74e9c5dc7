// Checkpoints against real process deaths and a full disk: a writer
// SIGKILLed at any moment never leaves a partial file under a final name,
// and a write that runs out of space is an IoError that leaves nothing
// behind. The children are ForkedChilds of this test; they only save (no
// torch parallel ops, which are not fork-safe).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "checkpoint_test_util.h"
#include "tests/support/forked_child.h"
#include "common/error.h"
#include "dtrain/checkpoint.h"

namespace dtrain {
namespace {

using testing::TempDir;

constexpr int64_t kBlobBytes = int64_t{64} << 20;

// A large tensor with a position-dependent pattern, filled without torch ops.
torch::Tensor patternBlob() {
  torch::Tensor blob = torch::empty({kBlobBytes / 4}, torch::kInt);
  auto* p = blob.data_ptr<int32_t>();
  for (int64_t i = 0; i < blob.numel(); ++i) p[i] = static_cast<int32_t>(static_cast<uint32_t>(i) * 2654435761u);
  return blob;
}

// The child: saves increasing steps until it is killed, reporting one byte
// after each completed save.
int saveUntilKilled(const testing::ChildSide& side, const std::string& dir, int64_t first_step, CheckpointState state) {
  Checkpointer ckpt({.dir = dir, .keep = 3});
  for (int64_t step = first_step;; ++step) {
    state.tensors.at("step").data_ptr<int64_t>()[0] = step;
    state.meta["step"] = step;
    ckpt.save(step, state);
    side.report("s");
  }
}

// Waits until the child reports `saves` completed saves; false on a timeout.
bool awaitSaves(testing::ForkedChild& writer, int saves) {
  for (int done = 0; done < saves; ++done) {
    if (writer.readReport(std::chrono::steady_clock::now() + std::chrono::seconds(20), 1) != "s") return false;
  }
  return true;
}

int64_t stepOfPath(const std::string& path) {
  const std::string name = path.substr(path.rfind('/') + 1);
  return std::stoll(name.substr(5, name.size() - 10));  // ckpt-<digits>.dtck
}

TEST(CheckpointCrashTest, SigkilledWriterNeverLeavesAPartialFinalFile) {
  TempDir dir;
  CheckpointState state;
  state.tensors["blob"] = patternBlob();
  state.tensors["step"] = torch::zeros({1}, torch::kLong);

  // Each round: let the writer complete some saves (none in the first, so
  // its kill lands in the very first write), then kill it `delay` later,
  // which with 64 MiB files is almost always in the middle of the next save.
  struct Round {
    int saves, delay_ms;
  } rounds[] = {{0, 10}, {1, 10}, {1, 60}, {2, 120}, {1, 200}};
  int64_t next_step = 1, newest = 0, killed_mid_write = 0;
  for (const Round& round : rounds) {
    SCOPED_TRACE("kill " + std::to_string(round.delay_ms) + " ms after " + std::to_string(round.saves) + " saves");
    testing::ForkedChild writer(
        [&](const testing::ChildSide& side) { return saveUntilKilled(side, dir.path(), next_step, state); });
    const pid_t pid = writer.pid();
    const bool progressed = awaitSaves(writer, round.saves);
    if (progressed) std::this_thread::sleep_for(std::chrono::milliseconds(round.delay_ms));
    writer.kill(SIGKILL);
    const int status = writer.reap();
    ASSERT_TRUE(progressed) << "the writer completed no save in 20 s";
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "writer exited early, status " << status;

    for (const std::string& name : testing::namesIn(dir.path())) {
      if (name.ends_with("-" + std::to_string(pid))) ++killed_mid_write;
    }
    Checkpointer reader({.dir = dir.path(), .keep = 3});
    const std::vector<std::string> files = reader.list();
    EXPECT_LE(files.size(), 4u);  // keep, plus one when killed between rename and prune
    for (const std::string& path : files) {
      SCOPED_TRACE(path);
      CheckpointState loaded;
      ASSERT_NO_THROW(loaded = loadCheckpoint(path));
      const int64_t step = stepOfPath(path);
      EXPECT_EQ(loaded.meta.at("step"), step);
      EXPECT_EQ(loaded.tensors.at("step").item<int64_t>(), step);
      EXPECT_TRUE(torch::equal(loaded.tensors.at("blob"), state.tensors.at("blob")));
    }
    const auto latest = reader.loadLatestValid();
    ASSERT_EQ(latest.has_value(), !files.empty());
    if (latest) {
      EXPECT_EQ(latest->first, files.front());
      EXPECT_GE(stepOfPath(files.front()), newest + round.saves);  // every reported save is there
      newest = stepOfPath(files.front());
      next_step = newest + 1;
    }
  }
  std::printf("[ info ] newest step %lld; %lld of 5 kills landed mid-write\n", static_cast<long long>(newest),
              static_cast<long long>(killed_mid_write));
  EXPECT_GE(newest, 5);
}

TEST(CheckpointCrashTest, FullDiskIsAnIoErrorThatLeavesNoTemporary) {
  TempDir dir;
  Checkpointer ckpt({.dir = dir.path()});
  CheckpointState small;
  small.tensors["x"] = torch::zeros({4});
  ckpt.save(1, small);
  CheckpointState big;
  big.tensors["blob"] = torch::zeros({1 << 20});  // 4 MiB

  testing::ForkedChild writer([&](const testing::ChildSide& side) {
    // A 1 MiB file-size limit stands in for a full disk (EFBIG, like ENOSPC).
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{1 << 20, 1 << 20};
    std::string report = "setrlimit failed";
    if (::setrlimit(RLIMIT_FSIZE, &limit) == 0) {
      try {
        ckpt.save(2, big);
        report = "no error";
      } catch (const IoError& e) {
        report = "IoError: " + e.message();
      } catch (const std::exception& e) {
        report = std::string("other error: ") + e.what();
      }
    }
    side.report(report);
    return 0;
  });
  const std::string report = writer.readReport(std::chrono::steady_clock::now() + std::chrono::seconds(60));
  writer.reap();

  EXPECT_TRUE(report.starts_with("IoError: ")) << report;
  EXPECT_NE(report.find(dir / "ckpt-000000002.dtck"), std::string::npos) << report;
  EXPECT_NE(report.find("File too large"), std::string::npos) << report;
  EXPECT_EQ(testing::namesIn(dir.path()), std::vector<std::string>{"ckpt-000000001.dtck"});
}

}  // namespace
}  // namespace dtrain
