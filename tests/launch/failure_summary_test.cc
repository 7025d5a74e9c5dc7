// The root-cause summary (text and JSON), signal names, the launcher's exit
// code and the error-file reader, on hand-built failures.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "helpers/worker_test_util.h"
#include "launch/error_file.h"
#include "launch/worker_group.h"

namespace dtrain {
namespace {

using testing::makeTempDir;

WorkerFailure failure(int rank, int exit_code, int signal) {
  WorkerFailure f;
  f.local_rank = rank % 4;
  f.global_rank = rank;
  f.pid = 1000 + rank;
  f.exit_code = exit_code;
  f.signal = signal;
  // 2026-11-21T15:40:01Z
  f.time = std::chrono::system_clock::time_point(std::chrono::seconds(1795275601));
  return f;
}

TEST(SignalNameTest, NamesCommonSignalsAndNumbersTheRest) {
  EXPECT_EQ(signalName(SIGKILL), "SIGKILL");
  EXPECT_EQ(signalName(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(signalName(SIGABRT), "SIGABRT");
  EXPECT_EQ(signalName(SIGBUS), "SIGBUS");
  EXPECT_EQ(signalName(SIGUSR2), "SIGUSR2");
  EXPECT_EQ(signalName(SIGRTMIN + 8), "signal " + std::to_string(SIGRTMIN + 8));
  EXPECT_EQ(signalName(0), "signal 0");
}

TEST(LauncherExitCodeTest, ExitCodeOrOneHundredTwentyEightPlusSignal) {
  EXPECT_EQ(launcherExitCode(failure(0, 3, 0)), 3);
  EXPECT_EQ(launcherExitCode(failure(0, 0, SIGKILL)), 137);
  EXPECT_EQ(launcherExitCode(failure(0, 0, SIGSEGV)), 139);
}

TEST(MissingModuleHintTest, NamesTheInterpreterAndPythonExecOnlyForAMissingModule) {
  auto root = failure(0, 1, 0);
  root.stderr_tail = {"Traceback (most recent call last):", "  File \"train.py\", line 1, in <module>",
                      "ModuleNotFoundError: No module named 'torch'"};
  EXPECT_EQ(missingModuleHint(root, "/home/u/.pyenv/shims/python3", "python3 on PATH"),
            "Hint: the workers ran /home/u/.pyenv/shims/python3 (python3 on PATH; torchrun runs its own "
            "interpreter, sys.executable), which cannot import 'torch'.\n"
            "  To run them with another Python, name it: PYTHON_EXEC=/path/to/python3 dtrain launch ...\n");
  EXPECT_EQ(missingModuleHint(root, "/opt/py/bin/python", "PYTHON_EXEC"),
            "Hint: the workers ran /opt/py/bin/python (PYTHON_EXEC), which cannot import 'torch'.\n"
            "  To run them with another Python, name it: PYTHON_EXEC=/path/to/python3 dtrain launch ...\n");
  EXPECT_EQ(missingModuleHint(root, "", ""), "") << "no python ran (--no-python)";
  root.stderr_tail = {"RuntimeError: CUDA out of memory"};
  EXPECT_EQ(missingModuleHint(root, "/usr/bin/python3", "python3 on PATH"), "");
  root.error_message = "ModuleNotFoundError: No module named 'torchvision.models'";
  EXPECT_NE(missingModuleHint(root, "/usr/bin/python3", "python3 on PATH").find("cannot import 'torchvision.models'"),
            std::string::npos) << "the error file counts too";
}

TEST(FailureSummaryTest, RootCauseBlockForAnExitCode) {
  auto root = failure(5, 3, 0);
  root.error_message = "ValueError: bad batch\n  raised at line 7";
  root.stderr_tail = {"Traceback (most recent call last):", "ValueError: bad batch"};
  const std::string text = formatFailureSummary({root}, "vm", 1);
  EXPECT_EQ(text,
            "dtrain launch: worker group failed (attempt 1)\n"
            "Root cause (first observed failure):\n"
            "  time      : 2026-11-21T15:40:01Z\n"
            "  host      : vm\n"
            "  rank      : 5 (local_rank: 1)\n"
            "  exit code : 3 (pid: 1005)\n"
            "  error file: ValueError: bad batch\n"
            "                raised at line 7\n"
            "  last 2 lines of stderr:\n"
            "    Traceback (most recent call last):\n"
            "    ValueError: bad batch\n"
            "Other failures: <none>\n");
}

TEST(FailureSummaryTest, SignalsOomHintAndOtherFailures) {
  auto root = failure(1, 0, SIGKILL);
  auto other = failure(2, 0, SIGSEGV);
  other.error_file_contents = "not json at all";
  const std::string text = formatFailureSummary({root, other}, "vm", 0);
  EXPECT_NE(text.find("  exit code : -9 (pid: 1001)\n"
                      "  signal    : SIGKILL (possibly killed by the OOM killer)\n"
                      "  error file: <N/A>\n"
                      "  last lines of stderr: <none>\n"
                      "Other failures:\n[1]:\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  rank      : 2 (local_rank: 2)\n"
                      "  exit code : -11 (pid: 1002)\n"
                      "  signal    : SIGSEGV\n"
                      "  error file: not json at all\n"),
            std::string::npos)
      << text;
}

TEST(FailureSummaryTest, JsonCarriesTheSameFields) {
  auto root = failure(1, 0, SIGKILL);
  root.stderr_tail = {"bad byte \xff here"};  // worker output need not be UTF-8
  auto other = failure(2, 4, 0);
  other.error_message = "boom";
  other.error_file_contents = R"({"message": {"message": "boom"}})";
  const auto json = nlohmann::json::parse(failureSummaryJson({root, other}, "vm", 2));
  EXPECT_EQ(json["attempt"], 2);
  EXPECT_EQ(json["host"], "vm");
  EXPECT_EQ(json["root_cause"], 0);
  EXPECT_EQ(json["exit_code"], 137);
  ASSERT_EQ(json["failures"].size(), 2u);
  const auto& first = json["failures"][0];
  EXPECT_EQ(first["time"], "2026-11-21T15:40:01Z");
  EXPECT_EQ(first["rank"], 1);
  EXPECT_EQ(first["local_rank"], 1);
  EXPECT_EQ(first["pid"], 1001);
  EXPECT_EQ(first["exit_code"], -9);
  EXPECT_EQ(first["signal"], "SIGKILL");
  EXPECT_EQ(first["error_file"], "<N/A>");
  EXPECT_EQ(first["stderr_tail"].size(), 1u);
  const auto& second = json["failures"][1];
  EXPECT_EQ(second["exit_code"], 4);
  EXPECT_TRUE(second["signal"].is_null());
  EXPECT_EQ(second["error_file"], "boom");
  EXPECT_EQ(second["error_file_contents"], other.error_file_contents);

  const auto empty = nlohmann::json::parse(failureSummaryJson({}, "vm", 0));
  EXPECT_TRUE(empty["root_cause"].is_null());
  EXPECT_TRUE(empty["failures"].empty());
}

class ErrorFileTest : public ::testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& text) {
    const std::string path = dir_ + "/error.json";
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_ = makeTempDir();
};

TEST_F(ErrorFileTest, ReadsTorchrunsFormat) {
  const std::string text =
      R"({"message": {"message": "RuntimeError: CUDA out of memory", "extraInfo": )"
      R"({"py_callstack": "Traceback ...", "timestamp": "1700000000"}}})";
  auto report = readErrorFile(write(text));
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->contents, text);
  EXPECT_EQ(report->message, "RuntimeError: CUDA out of memory");
}

TEST_F(ErrorFileTest, AcceptsAPlainStringMessage) {
  auto report = readErrorFile(write(R"({"message": "plain"})"));
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->message, "plain");
}

TEST_F(ErrorFileTest, KeepsRawTextThatIsNotTorchrunsJson) {
  for (const std::string text : {"Segfault in worker\n", R"({"other": 1})", R"([1, 2])", ""}) {
    auto report = readErrorFile(write(text));
    ASSERT_TRUE(report.has_value()) << text;
    EXPECT_EQ(report->contents, text);
    EXPECT_EQ(report->message, "") << text;
  }
}

TEST_F(ErrorFileTest, MissingOrUnsetIsNothing) {
  EXPECT_FALSE(readErrorFile(dir_ + "/never_written.json").has_value());
  EXPECT_FALSE(readErrorFile("").has_value());
}

}  // namespace
}  // namespace dtrain
