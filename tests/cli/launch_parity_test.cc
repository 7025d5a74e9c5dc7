// `dtrain launch` where users compare it with torchrun: its log folders, the
// MASTER_PORT workers get, the interpreter, the default run id and
// OMP_NUM_THREADS. Real agents and workers on loopback.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::testing {
namespace {

std::string launchCommand() { return dtrainBin() + " launch"; }

std::string script(const std::string& dir, const std::string& name, const std::string& body) {
  const std::string path = dir + "/" + name;
  writeFile(path, body);
  return path;
}

std::vector<std::string> entriesOf(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  return names;
}

// A rerun into the same --log-dir with the same run id: the second run's
// summary quotes only its own error, never the error file the first left.
TEST(LaunchParityTest, EveryRunHasItsOwnLogFolderAndReadsOnlyItsOwnErrorFiles) {
  const std::string dir = makeTempDir("dtrain-launch-parity");
  const std::string logs = dir + "/logs";
  const std::string first = script(dir, "first.sh",
                                   "printf '{\"message\": {\"message\": \"RuntimeError: gloo: Connection closed by "
                                   "peer\"}}' > \"$TORCHELASTIC_ERROR_FILE\"\necho 'Connection closed by peer' >&2\n"
                                   "exit 1\n");
  const std::string second = script(dir, "second.sh",
                                    "echo \"ModuleNotFoundError: No module named 'absent_module'\" >&2\nexit 1\n");
  const std::string flags = " --nproc-per-node 1 --rdzv-id samejob --log-dir " + logs + " --master-port ";
  auto a = runCommand(launchCommand() + flags + std::to_string(freePort()) + " --no-python sh " + first, 60);
  ASSERT_EQ(a.exit_code, 1) << a.output;
  ASSERT_TRUE(contains(a.output, "Connection closed by peer")) << a.output;
  auto b = runCommand(launchCommand() + flags + std::to_string(freePort()) + " --no-python sh " + second, 60);
  EXPECT_EQ(b.exit_code, 1) << b.output;
  EXPECT_TRUE(contains(b.output, "ModuleNotFoundError: No module named 'absent_module'")) << b.output;
  EXPECT_FALSE(contains(b.output, "Connection closed")) << "the first run's error in the second's summary\n"
                                                        << b.output;
  const std::vector<std::string> runs = entriesOf(logs);
  ASSERT_EQ(runs.size(), 2u) << "one folder per run under --log-dir";
  for (const std::string& run : runs) {
    EXPECT_TRUE(std::regex_match(run, std::regex("samejob_.{6}"))) << run;
    EXPECT_TRUE(pathExists(logs + "/" + run + "/attempt_0/0/stderr.log")) << run;
    EXPECT_TRUE(pathExists(logs + "/" + run + "/failure.json")) << run;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(b.output, m, std::regex("Logs: (\\S+)/attempt_0/"))) << b.output;
  EXPECT_TRUE(contains(readFile(std::string(m[1]) + "/attempt_0/0/stderr.log"), "absent_module")) << m[1];
}

int occurrencesOf(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(LaunchParityTest, WorkersGetTheMasterPortTheyWereGiven) {
  const std::string port = std::to_string(freePort());
  auto r = runCommand(launchCommand() + " --nproc-per-node 2 --master-port " + port +
                      " --no-python sh -c \"echo PORT=\\$MASTER_PORT\"", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(occurrencesOf(r.output, "PORT=" + port), 2) << r.output;
  auto pet = runCommand("PET_MASTER_PORT=" + port + " " + launchCommand() +
                        " --nproc-per-node 1 --no-python sh -c \"echo PORT=\\$MASTER_PORT\"", 60);
  ASSERT_EQ(pet.exit_code, 0) << pet.output;
  EXPECT_EQ(occurrencesOf(pet.output, "PORT=" + port), 1) << pet.output;
}

// A port the user gave is the one their firewall opens: when it is taken,
// the job fails naming it instead of moving the workers to another port.
TEST(LaunchParityTest, AGivenMasterPortThatIsTakenIsNotReplaced) {
  const std::string dir = makeTempDir("dtrain-launch-parity");
  const std::string worker = script(dir, "taken.sh",
                                    "echo WORKER-PORT $MASTER_PORT\n"
                                    "echo \"RuntimeError: The server socket has failed to listen on any local network "
                                    "address. port: $MASTER_PORT, useIpv6: 0, code: -98, name: EADDRINUSE, message: "
                                    "address already in use\" >&2\nexit 1\n");
  const std::string port = std::to_string(freePort());
  auto r = runCommand(launchCommand() + " --nproc-per-node 1 --max-restarts 0 --master-port " + port + " --no-python sh " +
                      worker, 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(occurrencesOf(r.output, "WORKER-PORT "), 1) << "no second attempt on another port\n" << r.output;
  EXPECT_TRUE(contains(r.output, "MASTER_PORT " + port + " (--master-port) is in use")) << r.output;
}

// Two jobs started alike on one host (default ports, no --rdzv-id) both run,
// each under a run id of its own: their log folders and their status files
// (named by TORCHELASTIC_RUN_ID) do not overwrite each other.
TEST(LaunchParityTest, TwoJobsOnOneHostGetRunIdsAndLogFoldersOfTheirOwn) {
  const std::string dir = makeTempDir("dtrain-launch-parity");
  const std::string logs = dir + "/logs";
  const std::string job = launchCommand() + " --nproc-per-node 1 --log-dir " + logs +
                          " --no-python sh -c \"echo ID=\\$TORCHELASTIC_RUN_ID; sleep 1\"";
  auto r = runCommand(job + " > " + dir + "/a.log 2>&1 & a=$!; " + job + " > " + dir + "/b.log 2>&1 & b=$!; "
                      "wait $a; echo a-exit=$?; wait $b; echo b-exit=$?; cat " + dir + "/a.log " + dir + "/b.log", 60);
  EXPECT_TRUE(contains(r.output, "a-exit=0")) << r.output;
  EXPECT_TRUE(contains(r.output, "b-exit=0")) << r.output;
  std::set<std::string> ids;
  const std::regex id_line("ID=(\\S+)");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), id_line); it != std::sregex_iterator(); ++it) {
    ids.insert((*it)[1]);
  }
  ASSERT_EQ(ids.size(), 2u) << r.output;
  for (const std::string& id : ids) EXPECT_TRUE(std::regex_match(id, std::regex("job-\\d{8}-\\d{6}-\\d+"))) << id;
  const std::vector<std::string> runs = entriesOf(logs);
  ASSERT_EQ(runs.size(), 2u) << r.output;
  std::set<std::string> owners;
  for (const std::string& run : runs) owners.insert(run.substr(0, run.rfind('_')));
  EXPECT_EQ(owners, ids) << "each job's folder is <run-id>_<random>";
}

TEST(LaunchParityTest, OmpNumThreadsFollowsTorchrunsRule) {
  const std::string show = " --no-python sh -c \"echo OMP=[\\$OMP_NUM_THREADS]\"";
  const std::string banner = "setting OMP_NUM_THREADS=1 for each of the 2 workers";
  auto two = runCommand("env -u OMP_NUM_THREADS " + launchCommand() + " --nproc-per-node 2" + show, 60);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_EQ(occurrencesOf(two.output, "OMP=[1]"), 2) << two.output;
  EXPECT_EQ(occurrencesOf(two.output, banner), 1) << "said once\n" << two.output;
  auto own = runCommand("OMP_NUM_THREADS=3 " + launchCommand() + " --nproc-per-node 2" + show, 60);
  ASSERT_EQ(own.exit_code, 0) << own.output;
  EXPECT_EQ(occurrencesOf(own.output, "OMP=[3]"), 2) << "the user's value is kept\n" << own.output;
  EXPECT_FALSE(contains(own.output, "OMP_NUM_THREADS=1")) << own.output;
  auto one = runCommand("env -u OMP_NUM_THREADS " + launchCommand() + " --nproc-per-node 1" + show, 60);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(occurrencesOf(one.output, "OMP=[]"), 1) << "one worker: left unset\n" << one.output;
  EXPECT_FALSE(contains(one.output, "setting OMP_NUM_THREADS")) << one.output;
}

// torchrun sets TORCH_NCCL_ASYNC_ERROR_HANDLING=1 for every worker unless
// the user set it.
TEST(LaunchParityTest, NcclAsyncErrorHandlingFollowsTorchrunsRule) {
  const std::string show = " --nproc-per-node 2 --no-python sh -c \"echo NCCL=[\\$TORCH_NCCL_ASYNC_ERROR_HANDLING]\"";
  auto unset = runCommand("env -u TORCH_NCCL_ASYNC_ERROR_HANDLING " + launchCommand() + show, 60);
  ASSERT_EQ(unset.exit_code, 0) << unset.output;
  EXPECT_EQ(occurrencesOf(unset.output, "NCCL=[1]"), 2) << unset.output;
  auto own = runCommand("TORCH_NCCL_ASYNC_ERROR_HANDLING=0 " + launchCommand() + show, 60);
  ASSERT_EQ(own.exit_code, 0) << own.output;
  EXPECT_EQ(occurrencesOf(own.output, "NCCL=[0]"), 2) << "the user's value is kept\n" << own.output;
}

// A worker whose Python lacks a module it imports (torch, typically: the
// python3 on PATH is not the one with torch): the summary names the
// interpreter that ran and how to choose another.
TEST(LaunchParityTest, AMissingModuleNamesTheInterpreterThatRanAndPythonExec) {
  auto which = runCommand("command -v python3", 10);
  if (which.exit_code != 0) GTEST_SKIP() << "no python3 on PATH";
  const std::string python = which.output.substr(0, which.output.find('\n'));
  const std::string dir = makeTempDir("dtrain-launch-parity");
  const std::string worker = script(dir, "needs_module.py", "import absent_module_for_dtrain_test\n");
  auto on_path = runCommand(launchCommand() + " --nproc-per-node 1 --master-port " + std::to_string(freePort()) + " " +
                            worker, 60);
  EXPECT_EQ(on_path.exit_code, 1) << on_path.output;
  EXPECT_TRUE(contains(on_path.output, "Hint: the workers ran " + python + " (python3 on PATH;")) << on_path.output;
  EXPECT_TRUE(contains(on_path.output, "cannot import 'absent_module_for_dtrain_test'")) << on_path.output;
  EXPECT_TRUE(contains(on_path.output, "PYTHON_EXEC=/path/to/python3")) << on_path.output;
  auto named = runCommand("PYTHON_EXEC=" + python + " " + launchCommand() + " --nproc-per-node 1 --master-port " +
                          std::to_string(freePort()) + " " + worker, 60);
  EXPECT_EQ(named.exit_code, 1) << named.output;
  EXPECT_TRUE(contains(named.output, "Hint: the workers ran " + python + " (PYTHON_EXEC)")) << named.output;
  auto other = runCommand(launchCommand() + " --nproc-per-node 1 --master-port " + std::to_string(freePort()) +
                          " --no-python sh -c \"echo 'ModuleNotFoundError: No module named x' >&2; exit 1\"", 60);
  EXPECT_FALSE(contains(other.output, "Hint:")) << "no python ran\n" << other.output;
}

// The README's first example, as written there.
TEST(LaunchParityTest, TheReadmeDdpExampleTrainsOnTwoWorkers) {
  if (runCommand(testPython() + " -c 'import torch.distributed' 2>&1", 60).exit_code != 0) {
    GTEST_SKIP() << testPython() << " cannot import torch.distributed (Debian's python3-torch)";
  }
  auto r = runCommand("PYTHON_EXEC=" + testPython() + " " + launchCommand() + " --nproc-per-node 2 --master-port " +
                      std::to_string(freePort()) + " " + sourceDir() + "/examples/ddp_example.py", 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* rank : {"0", "1"}) {
    EXPECT_TRUE(contains(r.output, std::string("rank ") + rank + "/2 step 9 loss ")) << r.output;
  }
  std::set<std::string> checksums;
  const std::regex done("rank \\d/2 done, weights checksum (\\S+)");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), done); it != std::sregex_iterator(); ++it) {
    checksums.insert((*it)[1]);
  }
  EXPECT_EQ(checksums.size(), 1u) << "DDP keeps the replicas equal\n" << r.output;
}

}  // namespace
}  // namespace dtrain::testing
