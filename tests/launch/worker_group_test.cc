// WorkerGroup with real processes: spawning, log routing, failures.
// Stopping and signals: worker_group_stop_test.cc.
#include "launch/worker_group.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "helpers/worker_test_util.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using testing::CapturedConsole;
using testing::makeTempDir;
using testing::pollUntilDone;
using testing::readFile;
using testing::shellSpec;
using testing::splitLines;
using testing::workerEnvs;

class WorkerGroupTest : public ::testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string logFile(int attempt, int local_rank, const char* name) const {
    return dir_ + "/attempt_" + std::to_string(attempt) + "/" + std::to_string(local_rank) + "/" + name;
  }
  std::string dir_ = makeTempDir();
};

TEST_F(WorkerGroupTest, ConcurrentLinesReachTheConsoleWholeAndPrefixed) {
  // yes|head writes 8 KiB blocks that cut lines anywhere; the stderr loop
  // writes line by line: both must come out as whole, prefixed lines.
  constexpr int kOutLines = 3000, kErrLines = 300;
  const std::string payload(300, 'x');
  auto spec = shellSpec("yes \"" + payload + " $RANK\" | head -n " + std::to_string(kOutLines) +
                        "; i=0; while [ $i -lt " + std::to_string(kErrLines) +
                        " ]; do echo \"err $RANK $i\" >&2; i=$((i+1)); done");
  spec.line_prefix_template = "<${role_name}|${rank}|${local_rank}|${host}> ";
  spec.role = "trainer";
  CapturedConsole console;
  {
    WorkerGroup group(spec, workerEnvs(3, 10));
    group.start();
    EXPECT_EQ(pollUntilDone(group, 20s), GroupState::kSucceeded);
    group.stop();
  }
  const auto out = splitLines(console.out());
  const auto err = splitLines(console.err());
  std::map<int, int> out_count, err_next;
  for (const auto& line : out) {
    bool matched = false;
    for (int local = 0; local < 3; ++local) {
      const int rank = 10 + local;
      const std::string prefix = "<trainer|" + std::to_string(rank) + "|" + std::to_string(local) + "|testhost> ";
      if (line == prefix + payload + " " + std::to_string(rank)) {
        ++out_count[local];
        matched = true;
      }
    }
    ASSERT_TRUE(matched) << "torn or unprefixed stdout line: " << line.substr(0, 120);
  }
  for (int local = 0; local < 3; ++local) EXPECT_EQ(out_count[local], kOutLines) << "local rank " << local;
  for (const auto& line : err) {
    int rank = -1, local = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "<trainer|%d|%d|testhost> err", &rank, &local), 2) << line;
    ASSERT_EQ(rank, 10 + local) << line;
    ASSERT_EQ(line, "<trainer|" + std::to_string(rank) + "|" + std::to_string(local) + "|testhost> err " +
                        std::to_string(rank) + " " + std::to_string(err_next[local]))
        << "stderr lines of one worker out of order or torn";
    ++err_next[local];
  }
  for (int local = 0; local < 3; ++local) EXPECT_EQ(err_next[local], kErrLines);
}

TEST_F(WorkerGroupTest, WritesRawLogFilesPerAttemptAndRank) {
  auto spec = shellSpec("echo \"out $RANK\"; echo \"err $RANK\" >&2; printf 'partial $RANK'");
  spec.log_dir = dir_;
  spec.attempt = 2;
  CapturedConsole console;
  {
    WorkerGroup group(spec, workerEnvs(2, 4));
    group.start();
    EXPECT_EQ(pollUntilDone(group, 10s), GroupState::kSucceeded);
  }  // the destructor stops and flushes
  const std::string out = console.out();
  for (int local = 0; local < 2; ++local) {
    const std::string rank = std::to_string(4 + local);
    // Raw: no prefix, and the unterminated last line stays unterminated.
    EXPECT_EQ(readFile(logFile(2, local, "stdout.log")), "out " + rank + "\npartial $RANK");
    EXPECT_EQ(readFile(logFile(2, local, "stderr.log")), "err " + rank + "\n");
    // Console: default prefix, partial line flushed with a newline at EOF.
    EXPECT_NE(out.find("[testhost:" + rank + "]: out " + rank + "\n"), std::string::npos) << out;
    EXPECT_NE(out.find("[testhost:" + rank + "]: partial $RANK\n"), std::string::npos) << out;
  }
}

TEST_F(WorkerGroupTest, RedirectsTeesAndLocalRanksFilter) {
  auto spec = shellSpec("echo \"out $LOCAL_RANK\"; echo \"err $LOCAL_RANK\" >&2");
  spec.log_dir = dir_;
  spec.line_prefix_template = "${local_rank}: ";
  spec.redirects = {{0, StreamSet::kStdout}, {-1, StreamSet::kStderr}};  // -1: every other rank
  spec.tees = {{1, StreamSet::kStderr}};                                 // puts rank 1's stderr back
  spec.local_ranks_filter = std::set<int>{0, 1};                         // rank 2 off the console
  CapturedConsole console;
  {
    WorkerGroup group(spec, workerEnvs(3));
    group.start();
    EXPECT_EQ(pollUntilDone(group, 10s), GroupState::kSucceeded);
  }
  EXPECT_EQ(console.out(), "1: out 1\n");
  const auto err = splitLines(console.err());
  std::vector<std::string> worker_err;
  std::copy_if(err.begin(), err.end(), std::back_inserter(worker_err),
               [](const std::string& l) { return l.find(": err ") != std::string::npos; });
  std::sort(worker_err.begin(), worker_err.end());
  EXPECT_EQ(worker_err, (std::vector<std::string>{"0: err 0", "1: err 1"}));
  for (int local = 0; local < 3; ++local) {  // files whatever the console shows
    EXPECT_EQ(readFile(logFile(0, local, "stdout.log")), "out " + std::to_string(local) + "\n");
    EXPECT_EQ(readFile(logFile(0, local, "stderr.log")), "err " + std::to_string(local) + "\n");
  }
}

TEST_F(WorkerGroupTest, FailedWorkerReportsExitCodeAndStderrTail) {
  auto spec = shellSpec(
      "if [ \"$LOCAL_RANK\" = 1 ]; then i=1; while [ $i -le 50 ]; do echo \"err line $i\" >&2; "
      "i=$((i+1)); done; exit 3; fi; exec sleep 30");
  CapturedConsole console;
  WorkerGroup group(spec, workerEnvs(2, 6));
  group.start();
  const auto state = pollUntilDone(group, 10s);
  const auto failures = group.failures();
  group.stop();
  console.restore();
  ASSERT_EQ(state, GroupState::kFailed);
  ASSERT_EQ(failures.size(), 1u);
  const WorkerFailure& f = failures[0];
  EXPECT_EQ(f.local_rank, 1);
  EXPECT_EQ(f.global_rank, 7);
  EXPECT_EQ(f.exit_code, 3);
  EXPECT_EQ(f.signal, 0);
  EXPECT_GT(f.pid, 0);
  EXPECT_EQ(f.error_file_contents, "");
  ASSERT_EQ(f.stderr_tail.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(f.stderr_tail[i], "err line " + std::to_string(31 + i));
  EXPECT_EQ(launcherExitCode(f), 3);
  EXPECT_TRUE(group.livePids().empty());
}

TEST_F(WorkerGroupTest, SigkilledWorkerIsReportedBySignalName) {
  auto spec = shellSpec("echo about to die >&2; kill -9 $$");
  CapturedConsole console;
  WorkerGroup group(spec, workerEnvs(1, 3));
  group.start();
  const auto state = pollUntilDone(group, 10s);
  const auto failures = group.failures();
  console.restore();
  ASSERT_EQ(state, GroupState::kFailed);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].signal, 9);
  EXPECT_EQ(launcherExitCode(failures[0]), 137);
  EXPECT_EQ(failures[0].stderr_tail, std::vector<std::string>{"about to die"});
  const std::string text = formatFailureSummary(failures, "testhost", 1);
  EXPECT_NE(text.find("SIGKILL"), std::string::npos) << text;
  EXPECT_NE(text.find("OOM killer"), std::string::npos) << text;
  EXPECT_NE(text.find("exit code : -9"), std::string::npos) << text;
  EXPECT_NE(text.find("rank      : 3 (local_rank: 0)"), std::string::npos) << text;
  const auto json = nlohmann::json::parse(failureSummaryJson(failures, "testhost", 1));
  EXPECT_EQ(json["root_cause"], 0);
  EXPECT_EQ(json["failures"][0]["signal"], "SIGKILL");
  EXPECT_EQ(json["failures"][0]["exit_code"], -9);
  EXPECT_EQ(json["failures"][0]["rank"], 3);
  EXPECT_EQ(json["failures"][0]["stderr_tail"][0], "about to die");
}

TEST_F(WorkerGroupTest, ReadsTheErrorFileOfAFailedWorker) {
  auto envs = workerEnvs(2);
  for (int i = 0; i < 2; ++i) envs[i]["TORCHELASTIC_ERROR_FILE"] = dir_ + "/error_" + std::to_string(i) + ".json";
  auto spec = shellSpec(
      "if [ \"$LOCAL_RANK\" = 0 ]; then exec sleep 30; fi; printf '%s' '{\"message\": {\"message\": "
      "\"RuntimeError: boom\", \"extraInfo\": {\"py_callstack\": \"Traceback ...\", \"timestamp\": "
      "\"1700000000\"}}}' > \"$TORCHELASTIC_ERROR_FILE\"; exit 1");
  WorkerGroup group(spec, envs);
  group.start();
  ASSERT_EQ(pollUntilDone(group, 10s), GroupState::kFailed);
  const auto failures = group.failures();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].error_message, "RuntimeError: boom");
  EXPECT_NE(failures[0].error_file_contents.find("\"py_callstack\": \"Traceback ...\""), std::string::npos);
  const std::string text = formatFailureSummary(failures, "testhost", 0);
  EXPECT_NE(text.find("error file: RuntimeError: boom"), std::string::npos) << text;
}

TEST_F(WorkerGroupTest, UnknownCommandIsAConfigErrorNamingIt) {
  WorkerSpec spec;
  spec.argv = {"dtrain-no-such-command", "--flag"};
  WorkerGroup group(spec, workerEnvs(2));
  try {
    group.start();
    FAIL() << "start() did not throw";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.message(), "cannot run 'dtrain-no-such-command': No such file or directory");
  }
  EXPECT_TRUE(group.livePids().empty());
}

TEST_F(WorkerGroupTest, ExecFailureInTheChildIsReportedNotAnExitCode) {
  // Paths with a '/' are not searched: execve itself fails in the child and
  // the error pipe carries its errno back.
  const std::string not_executable = dir_ + "/script.sh";
  std::ofstream(not_executable) << "#!/bin/sh\necho hi\n";
  ::chmod(not_executable.c_str(), 0644);
  for (const auto& [path, reason] : std::vector<std::pair<std::string, std::string>>{
           {dir_ + "/missing/prog", "No such file or directory"}, {not_executable, "Permission denied"}}) {
    WorkerSpec spec;
    spec.argv = {path};
    WorkerGroup group(spec, workerEnvs(1));
    try {
      group.start();
      ADD_FAILURE() << "start() did not throw for " << path;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.message(), "cannot run '" + path + "': " + reason);
    }
  }
}

TEST_F(WorkerGroupTest, ChildGetsExactlyItsEnvironmentDevNullStdinAndNoStrayFds) {
  int stray[2];
  ASSERT_EQ(::pipe(stray), 0);
  // Inheritable (no O_CLOEXEC) and numbered apart from anything ls opens.
  const int stray_low = ::fcntl(stray[0], F_DUPFD, 100);
  const int stray_high = ::fcntl(stray[1], F_DUPFD, 101);
  ::close(stray[0]);
  ::close(stray[1]);
  WorkerSpec spec;
  spec.argv = {"env"};  // found through the PATH of the worker's environment
  spec.log_dir = dir_;
  spec.local_ranks_filter = std::set<int>{};  // files only
  std::vector<std::map<std::string, std::string>> envs = {
      {{"PATH", "/usr/bin:/bin"}, {"RANK", "0"}, {"SPACED", "two words"}, {"EMPTY", ""}}};
  {
    WorkerGroup group(spec, envs);
    group.start();
    EXPECT_EQ(pollUntilDone(group, 10s), GroupState::kSucceeded);
  }
  auto lines = splitLines(readFile(logFile(0, 0, "stdout.log")));
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"EMPTY=", "PATH=/usr/bin:/bin", "RANK=0", "SPACED=two words"}));

  spec.argv = {"/bin/sh", "-c", "readlink /proc/self/fd/0; ls /proc/self/fd"};
  spec.attempt = 1;
  {
    WorkerGroup group(spec, envs);
    group.start();
    EXPECT_EQ(group.livePids().size(), 1u);
    EXPECT_EQ(::getpgid(group.livePids()[0]), group.livePids()[0]);  // its own process group
    EXPECT_EQ(pollUntilDone(group, 10s), GroupState::kSucceeded);
  }
  ::close(stray_low);
  ::close(stray_high);
  auto out = splitLines(readFile(logFile(1, 0, "stdout.log")));
  ASSERT_GE(out.size(), 4u);
  EXPECT_EQ(out[0], "/dev/null");
  std::set<std::string> fds(out.begin() + 1, out.end());
  // ls's own: 0, 1, 2 and the directory it reads; nothing of ours.
  EXPECT_EQ(fds, (std::set<std::string>{"0", "1", "2", "3"}));
}

TEST_F(WorkerGroupTest, SucceedsWhenAllExitZeroAndRecordsFirstOutput) {
  auto spec = shellSpec("sleep 0.1; echo done");
  CapturedConsole console;
  WorkerGroup group(spec, workerEnvs(3));
  EXPECT_FALSE(group.firstOutputTime().has_value());
  const auto started = std::chrono::steady_clock::now();
  group.start();
  const auto state = pollUntilDone(group, 10s);
  group.stop();
  console.restore();
  EXPECT_EQ(state, GroupState::kSucceeded);
  EXPECT_TRUE(group.failures().empty());
  ASSERT_TRUE(group.firstOutputTime().has_value());
  EXPECT_GT(*group.firstOutputTime(), started);
  group.stop();  // a no-op
}

}  // namespace
}  // namespace dtrain
