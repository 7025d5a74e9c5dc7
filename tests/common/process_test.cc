// The process seam (common/process.h) with real processes: runProcess's
// output, exit codes, exec failures, and a timeout that takes the whole
// process group down, grandchildren included.
#include "common/process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/error.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string tempPath(const std::string& name) { return ::testing::TempDir() + "process_test_" + name; }

TEST(RunProcessTest, OutputGoesToTheFileAndTheExitCodeComesBack) {
  RunOptions options;
  options.output_path = tempPath("output");
  const RunResult r = runProcess({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, options);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exitCode(), 3);
  EXPECT_EQ(describeWaitStatus(r.wait_status), "exit code 3");
  EXPECT_EQ(readFile(options.output_path), "out\nerr\n");
}

TEST(RunProcessTest, TheEnvironmentIsExactlyTheOneGiven) {
  RunOptions options;
  options.env = std::map<std::string, std::string>{{"ONLY", "this"}, {"PATH", "/bin:/usr/bin"}};
  options.output_path = tempPath("env");
  ASSERT_EQ(runProcess({"env"}, options).exitCode(), 0);
  const std::string env = readFile(options.output_path);
  EXPECT_NE(env.find("ONLY=this"), std::string::npos) << env;
  EXPECT_EQ(env.find("HOME="), std::string::npos) << env;
}

TEST(RunProcessTest, ByDefaultTheChildInheritsThisProcesssEnvironment) {
  ::setenv("DTRAIN_PROCESS_TEST", "inherited", 1);
  RunOptions options;
  options.output_path = tempPath("inherit");
  ASSERT_EQ(runProcess({"/bin/sh", "-c", "echo $DTRAIN_PROCESS_TEST"}, options).exitCode(), 0);
  EXPECT_EQ(readFile(options.output_path), "inherited\n");
  ::unsetenv("DTRAIN_PROCESS_TEST");
}

TEST(RunProcessTest, AMissingCommandIsAConfigErrorNamingIt) {
  try {
    runProcess({"/nonexistent/tool", "--x"});
    FAIL() << "ran a missing command";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.message(), "cannot run '/nonexistent/tool': No such file or directory");
  }
}

TEST(RunProcessTest, AnOutputFileThatCannotBeCreatedIsAnIoErrorNamingTheCommand) {
  RunOptions options;
  options.output_path = "/nonexistent/dir/out";
  try {
    runProcess({"/bin/true"}, options);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(e.message().find("cannot create the output file of '/bin/true': open() failed: No such file"),
              std::string::npos)
        << e.message();
  }
}

TEST(RunProcessTest, ATimeoutKillsTheWholeGroupGrandchildrenIncluded) {
  const std::string pid_file = tempPath("grandchild.pid");
  fs::remove(pid_file);
  RunOptions options;
  options.timeout = std::chrono::milliseconds(300);
  options.kill_grace = std::chrono::milliseconds(300);
  options.output_path = tempPath("timeout");
  const auto start = std::chrono::steady_clock::now();
  const RunResult r =
      runProcess({"/bin/sh", "-c", "sleep 60 & echo $! > " + pid_file + "; wait"}, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(seconds, 5.0);
  EXPECT_EQ(describeWaitStatus(r.wait_status), "killed by signal 15 (SIGTERM)");
  const pid_t grandchild = std::stoi(readFile(pid_file));
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = !processAlive(grandchild);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "the background sleep " << grandchild << " outlived the timeout";
}

TEST(RunProcessTest, AChildThatIgnoresSigtermGetsSigkillAfterTheGrace) {
  RunOptions options;
  options.timeout = std::chrono::milliseconds(200);
  options.kill_grace = std::chrono::milliseconds(300);
  options.output_path = tempPath("stubborn");
  const RunResult r = runProcess({"/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"}, options);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(describeWaitStatus(r.wait_status), "killed by signal 9 (SIGKILL)");
  EXPECT_EQ(r.exitCode(), 137);
}

TEST(RunProcessTest, InheritedOutputReachesThisProcesssStdout) {
  // The parent's stdout is a pipe here, read back after the child ran.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const int saved = ::dup(1);
  ::dup2(fds[1], 1);
  ::close(fds[1]);
  const RunResult r = runProcess({"/bin/echo", "inherited output"});
  ::dup2(saved, 1);
  ::close(saved);
  char buffer[64] = {};
  const ssize_t n = ::read(fds[0], buffer, sizeof(buffer) - 1);
  ::close(fds[0]);
  EXPECT_EQ(r.exitCode(), 0);
  EXPECT_EQ(std::string(buffer, n > 0 ? static_cast<size_t>(n) : 0), "inherited output\n");
}

}  // namespace
}  // namespace dtrain
