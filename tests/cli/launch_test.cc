// `dtrain launch` end to end: real agents and workers on loopback.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"

namespace dtrain::testing {
namespace {

std::string launch() { return dtrainBin() + " launch"; }

int countOf(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}


TEST(LaunchTest, PyTorchDdpScriptTrainsAndRanksAgree) {
  auto r = runCommand("PYTHON_EXEC=/usr/bin/python3 " + launch() + " --nproc-per-node 2 --master-port " +
                      std::to_string(freePort()) + " " + sourceDir() + "/tests/cli/scripts/ddp_train.py", 240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  std::regex line("rank (\\d)/2 checksum (-?[0-9.]+)");
  std::set<std::string> ranks, checksums;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line); it != std::sregex_iterator(); ++it) {
    ranks.insert((*it)[1]);
    checksums.insert((*it)[2]);
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1"})) << r.output;
  EXPECT_EQ(checksums.size(), 1u) << "ranks disagree:\n" << r.output;
}

TEST(LaunchTest, WorkerEnvironmentIsTorchruns) {
  auto r = runCommand("env -u OMP_NUM_THREADS " + launch() + " --nproc-per-node 2 --max-restarts 3 --rdzv-id job7 "
                      "--master-port " + std::to_string(freePort()) + " --no-python sh -c \"echo "
                      "ENV rank=\\$RANK local=\\$LOCAL_RANK group=\\$GROUP_RANK role=\\$ROLE_NAME/\\$ROLE_RANK "
                      "lws=\\$LOCAL_WORLD_SIZE ws=\\$WORLD_SIZE gws=\\$GROUP_WORLD_SIZE rws=\\$ROLE_WORLD_SIZE "
                      "restart=\\$TORCHELASTIC_RESTART_COUNT max=\\$TORCHELASTIC_MAX_RESTARTS "
                      "id=\\$TORCHELASTIC_RUN_ID omp=\\$OMP_NUM_THREADS port=\\$MASTER_PORT "
                      "store=\\$DTRAIN_STORE_ADDR err=\\$TORCHELASTIC_ERROR_FILE\"", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank : {0, 1}) {
    std::string want = "ENV rank=" + std::to_string(rank) + " local=" + std::to_string(rank) +
                       " group=0 role=default/" + std::to_string(rank) +
                       " lws=2 ws=2 gws=1 rws=2 restart=0 max=3 id=job7 omp=1 port=";
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("store=127.0.0.1:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/attempt_0/1/error.json"), std::string::npos) << r.output;
}

TEST(LaunchTest, TwoAgentsFormAWorldOfFour) {
  int port = freePort();
  std::string agent = launch() + " --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" +
                      std::to_string(port) + " --rdzv-id two --no-python sh -c \"echo WORLD rank=\\$RANK ws=\\$WORLD_SIZE\"";
  auto r = runCommand("(" + agent + " &) ; " + agent + "; wait", 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The foreground agent's two workers, and the background one's.
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.output.find("WORLD rank=" + std::to_string(rank) + " ws=4"), std::string::npos) << r.output;
  }
}

TEST(LaunchTest, ThirdNodeJoiningTriggersReRendezvousToSix) {
  int port = freePort();
  std::string dir = makeTempDir("dtrain-launch-test");
  // Workers wait until the world has 6 ranks; the first two nodes' first
  // round has 4, so they are restarted when the third node arrives.
  std::string agent = launch() + " --nnodes 2:3 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" +
                      std::to_string(port) + " --rdzv-id grow --rdzv-conf last_call_timeout=1 --no-python sh -c "
                      "\"echo WORLD rank=\\$RANK ws=\\$WORLD_SIZE restart=\\$TORCHELASTIC_RESTART_COUNT; "
                      "[ \\$WORLD_SIZE = 6 ] || sleep 60\"";
  auto r = runCommand("(" + agent + " > " + dir + "/a.log 2>&1 &) ; (" + agent + " > " + dir + "/b.log 2>&1 &) ; "
                      "for i in $(seq 100); do grep -q ws=4 " + dir + "/a.log " + dir + "/b.log && break; sleep 0.2; done; " +
                      agent + "; sleep 2; cat " + dir + "/a.log " + dir + "/b.log", 180);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GE(countOf(r.output, "ws=4"), 4) << r.output;
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_NE(r.output.find("WORLD rank=" + std::to_string(rank) + " ws=6 restart=0"), std::string::npos)
        << "membership change must not consume a restart\n" << r.output;
  }
}

TEST(LaunchTest, LosingTheNodeThatHostsTheC10dStoreEndsTheJobWithASummaryNamingItAndTheFlag) {
  const int port = freePort();
  const std::string dir = makeTempDir("dtrain-launch-test");
  const std::string agent = launch() + " --nnodes 2 --nproc-per-node 1 --max-restarts 3 --monitor-interval 0.1 "
                            "--rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" + std::to_string(port) +
                            " --rdzv-id hostloss --rdzv-conf keep_alive_interval=1,keep_alive_max_attempt=2,is_host=";
  const std::string worker = " --no-python sh -c \"echo \\$\\$ > " + dir + "/worker.\\$RANK; sleep 60\"";
  // The host's agent and worker share one session: killing it is losing the node.
  auto r = runCommand("setsid " + agent + "1" + worker + " > " + dir + "/host.log 2>&1 & host=$!; " +
                      agent + "0" + worker + " > " + dir + "/other.log 2>&1 & other=$!; "
                      "for i in $(seq 300); do [ -f " + dir + "/worker.0 ] && [ -f " + dir + "/worker.1 ] && break; sleep 0.1; done; "
                      "start=$(date +%s%N); pkill -KILL -s $host; wait $other; echo other-exit=$?; "
                      "echo elapsed-ms=$(( ($(date +%s%N) - start) / 1000000 )); sleep 0.5; "
                      "for f in " + dir + "/worker.*; do p=$(cat $f); "
                      "if [ -e /proc/$p ] && ! grep -q \") Z\" /proc/$p/stat; then echo LEFT-BEHIND $p; fi; done; "
                      "cat " + dir + "/other.log", 120);
  EXPECT_NE(r.output.find("other-exit=1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lost the job store at 127.0.0.1:" + std::to_string(port)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the agent on 127.0.0.1 that hosts the store"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--rdzv-backend etcd"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("LEFT-BEHIND"), std::string::npos) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("elapsed-ms=(\\d+)"))) << r.output;
  // Grace of 2 s (keep-alive 1 s x 2) plus one bounded store request.
  EXPECT_LT(std::stoi(m[1]), 10000) << r.output;
}

// A node that falls silent (SIGSTOP: its connections stay open, its
// heartbeat stops) while its peers' workers would never notice by
// themselves: the peers' agents find it gone by the keep-alive and restart
// their group without it, consuming a restart, well before any collective
// timeout.
TEST(LaunchTest, ANodeThatFallsSilentIsDroppedAndTheGroupRestartsWithoutIt) {
  const int port = freePort();
  const std::string dir = makeTempDir("dtrain-launch-test");
  const std::string agent = launch() + " --nnodes 2:3 --nproc-per-node 1 --max-restarts 1 --monitor-interval 0.1 "
                            "--rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" + std::to_string(port) +
                            " --rdzv-id silent --rdzv-conf keep_alive_interval=0.5,keep_alive_max_attempt=4 "
                            "--no-python sh -c \"echo WORLD ws=\\$WORLD_SIZE restart=\\$TORCHELASTIC_RESTART_COUNT; "
                            "[ \\$WORLD_SIZE = 2 ] && exit 0; sleep 60\"";
  auto r = runCommand("(" + agent + " > " + dir + "/a.log 2>&1 &) ; sleep 0.5; (" + agent + " > " + dir +
                      "/b.log 2>&1 &) ; setsid " + agent + " > " + dir + "/c.log 2>&1 & c=$!; "
                      "for i in $(seq 300); do [ $(cat " + dir + "/*.log | grep -c ws=3) = 3 ] && break; sleep 0.1; done; "
                      "start=$(date +%s%N); pkill -STOP -s $c; "
                      "for i in $(seq 300); do [ $(cat " + dir + "/a.log " + dir + "/b.log | grep -c 'ws=2 restart=1') = 2 ] && break; sleep 0.1; done; "
                      "echo elapsed-ms=$(( ($(date +%s%N) - start) / 1000000 )); pkill -KILL -s $c; sleep 1; "
                      "cat " + dir + "/a.log " + dir + "/b.log", 120);
  EXPECT_EQ(countOf(r.output, "WORLD ws=2 restart=1"), 2) << r.output;
  EXPECT_NE(r.output.find("of this round (its agent's connection to the store closed, or no heartbeat for 2 s)"),
            std::string::npos) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("elapsed-ms=(\\d+)"))) << r.output;
  EXPECT_LT(std::stoi(m[1]), 15000) << r.output;
}

TEST(LaunchTest, KilledWorkerRestartsTheGroupUntilRestartsRunOut) {
  // Rank 1 dies only once rank 0 has said which restart it is in (a file
  // per restart): otherwise the group can be torn down before rank 0 runs.
  const std::string dir = makeTempDir("dtrain-launch-test");
  auto r = runCommand(launch() + " --nproc-per-node 2 --max-restarts 2 --monitor-interval 0.05 --master-port " +
                      std::to_string(freePort()) + " --no-python sh -c \"echo RESTART \\$RANK "
                      "\\$TORCHELASTIC_RESTART_COUNT; said=" + dir + "/said.\\$TORCHELASTIC_RESTART_COUNT; "
                      "if [ \\$RANK = 1 ]; then while [ ! -e \\$said ]; do sleep 0.01; done; "
                      "echo dying >&2; kill -9 \\$\\$; fi; touch \\$said; sleep 30\"", 120);
  EXPECT_EQ(r.exit_code, 137) << r.output;
  for (int count : {0, 1, 2}) {
    EXPECT_NE(r.output.find("RESTART 0 " + std::to_string(count)), std::string::npos) << r.output;
  }
  EXPECT_EQ(r.output.find("RESTART 0 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("SIGKILL"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("OOM killer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank      : 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("dying"), std::string::npos) << "stderr tail in the summary\n" << r.output;
}

TEST(LaunchTest, WorkerKilledOnceRecoversWithRestartCountOne) {
  auto r = runCommand(launch() + " --nproc-per-node 2 --max-restarts 1 --monitor-interval 0.05 --master-port " +
                      std::to_string(freePort()) + " --no-python sh -c \"echo DONE \\$RANK "
                      "\\$TORCHELASTIC_RESTART_COUNT; if [ \\$RANK = 1 ] && [ \\$TORCHELASTIC_RESTART_COUNT = 0 ]; "
                      "then kill -9 \\$\\$; fi; sleep 0.2\"", 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("DONE 1 1"), std::string::npos) << r.output;
}

TEST(LaunchTest, SigtermStopsEveryWorkerWithinTheGracePeriod) {
  std::string dir = makeTempDir("dtrain-launch-test");
  auto r = runCommand(launch() + " --nproc-per-node 3 --shutdown-timeout 2 --master-port " + std::to_string(freePort()) +
                      " --no-python sh -c \"trap \\\"\\\" TERM; echo \\$\\$ > " + dir +
                      "/pid.\\$RANK; sleep 60 & echo \\$! > " + dir + "/child.\\$RANK; wait\" & launcher=$!; "
                      "for i in $(seq 100); do [ -f " + dir + "/child.2 ] && break; sleep 0.1; done; "
                      "kill -TERM $launcher; wait $launcher; echo launcher-exit=$?; sleep 0.5; "
                      "for f in " + dir + "/pid.* " + dir + "/child.*; do p=$(cat $f); "
                      "if [ -e /proc/$p ] && ! grep -q \") Z\" /proc/$p/stat; then echo ORPHAN $p; fi; done", 60);
  EXPECT_NE(r.output.find("launcher-exit=143"), std::string::npos) << r.output;
  // A killed grandchild is re-parented to init and may stay a zombie until
  // init reaps it: dead, so not an orphan.
  EXPECT_EQ(r.output.find("ORPHAN"), std::string::npos) << r.output;
}

TEST(LaunchTest, PrefixTemplateFromTorchrunsVariable) {
  auto r = runCommand("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=\"<\\${role_name}-\\${rank}>\" " + launch() +
                      " --nproc-per-node 2 --role trainer --master-port " + std::to_string(freePort()) +
                      " --no-python echo hello", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("<trainer-0>hello"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("<trainer-1>hello"), std::string::npos) << r.output;
}

// Workers learn that their stderr reaches a terminal through the router
// (dtrain train then draws its progress bar): under a pseudo-terminal
// (script(1)) the variable is 1, through a pipe it is unset, and a worker
// whose stderr is redirected to its file never gets it.
TEST(LaunchTest, WorkersAreToldWhenTheirStderrReachesATerminal) {
  const std::string dir = makeTempDir("dtrain-launch-tty");
  std::ofstream(dir + "/worker.sh") << "echo \"tty=$DTRAIN_PROGRESS_TERMINAL\"\n";
  const std::string worker = " --no-python sh " + dir + "/worker.sh";
  const std::string job = launch() + " --nproc-per-node 2 --master-port " + std::to_string(freePort());
  auto r = runCommand("script -qec \"" + job + " --redirects 1:2 --log-dir " + dir + worker + "\" /dev/null", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(":0]: tty=1"), std::string::npos) << r.output;
  const size_t rank1 = r.output.find(":1]: tty=");
  ASSERT_NE(rank1, std::string::npos) << r.output;
  EXPECT_NE(r.output[rank1 + 9], '1') << "rank 1's stderr goes to its file only: " << r.output;
  r = runCommand(job + worker + " 2>&1 | cat", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("tty=1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("]: tty="), std::string::npos) << r.output;
}

// Writes a worker script into `dir` and returns its path (no shell quoting
// games in the launch command lines).
std::string writeScript(const std::string& dir, const std::string& name, const std::string& body) {
  std::string path = dir + "/" + name;
  std::ofstream(path) << body;
  return path;
}

TEST(LaunchTest, MasterPortCollisionIsRetriedWithoutUsingARestart) {
  // The first attempt's rank 0 fails the way PyTorch's store does when
  // MASTER_PORT was taken; the agent must retry with a new port and no
  // restart (--max-restarts 0), and the job then succeeds.
  std::string dir = makeTempDir("dtrain-launch-test");
  std::string script = writeScript(dir, "worker.sh", R"(
echo PORT $RANK $MASTER_PORT restart=$TORCHELASTIC_RESTART_COUNT
if [ $RANK = 0 ] && [ ! -e "$(dirname "$0")/once" ]; then
  touch "$(dirname "$0")/once"
  echo "RuntimeError: The server socket has failed to listen on any local network address. port: $MASTER_PORT, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use" >&2
  exit 1
fi
sleep 0.3
)");
  // --standalone: the port is one dtrain chose (a given --master-port is kept).
  auto r = runCommand(launch() + " --standalone --nproc-per-node 2 --max-restarts 0 --no-python sh " + script, 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("which this agent chose, was taken before the workers bound it; retrying on another port"),
            std::string::npos) << r.output;
  std::regex port_line("PORT 0 (\\d+) restart=0");
  std::set<std::string> ports;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), port_line); it != std::sregex_iterator(); ++it) {
    ports.insert((*it)[1]);
  }
  EXPECT_EQ(ports.size(), 2u) << "a second attempt on a new port\n" << r.output;
}

TEST(LaunchTest, FailureSummaryIsWrittenAsJsonInTheLogDir) {
  std::string dir = makeTempDir("dtrain-launch-test");
  std::string script = writeScript(dir, "fail.sh", "echo oops >&2\nexit $((RANK + 3))\n");
  auto r = runCommand(launch() + " --nproc-per-node 2 --rdzv-id jobj --log-dir " + dir + " --master-port " +
                      std::to_string(freePort()) + " --no-python sh " + script, 60);
  EXPECT_TRUE(r.exit_code == 3 || r.exit_code == 4) << r.output;
  // The run's own folder: <log-dir>/<run-id>_<random>.
  std::string run_dir;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("jobj_", 0) == 0) run_dir = entry.path().string();
  }
  ASSERT_FALSE(run_dir.empty()) << "no " << dir << "/jobj_*\n" << r.output;
  std::ifstream json(run_dir + "/failure.json");
  ASSERT_TRUE(json.good()) << "no " << run_dir << "/failure.json\n" << r.output;
  std::string text((std::istreambuf_iterator<char>(json)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("oops"), std::string::npos) << text;
  // The rank that failed first wrote its line; the other may have been
  // stopped before it ran `echo` (the group ends at the first failure).
  std::string logs[2];
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream stderr_log(run_dir + "/attempt_0/" + std::to_string(rank) + "/stderr.log");
    ASSERT_TRUE(stderr_log.good()) << "no stderr.log for rank " << rank;
    logs[rank].assign(std::istreambuf_iterator<char>(stderr_log), std::istreambuf_iterator<char>());
    EXPECT_TRUE(logs[rank].empty() || logs[rank] == "oops\n") << "rank " << rank << ": " << logs[rank];
  }
  EXPECT_TRUE(logs[0] == "oops\n" || logs[1] == "oops\n") << "neither rank's stderr.log holds its line";
}

struct BadLaunch {
  std::string args;
  std::string expected;
};

TEST(LaunchTest, BadInputIsAClearErrorNeverAHang) {
  int closed_port = freePort();
  const BadLaunch cases[] = {
      {"--frobnicate 1 x.py", "--frobnicate"},
      {"--nnodes 3:2 x.py", "--nnodes 3:2"},
      {"--nproc-per-node 0 x.py", "--nproc-per-node"},
      {"--nproc-per-node 1 --master-port " + std::to_string(freePort()) + " --no-python /nonexistent/cmd",
       "/nonexistent/cmd"},
      {"--nnodes 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" + std::to_string(closed_port) +
           " --rdzv-conf is_host=0,join_timeout=2 --no-python true",
       "127.0.0.1:" + std::to_string(closed_port)},
      {"--log-dir /etc/hostname --no-python true",
       "--log-dir /etc/hostname: '/etc/hostname' is a regular file; expected a directory (created if missing)"},
  };
  for (const auto& c : cases) {
    auto start = std::chrono::steady_clock::now();
    auto r = runCommand(launch() + " " + c.args, 60);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(r.exit_code, 0) << c.args << "\n" << r.output;
    EXPECT_NE(r.exit_code, 124) << "hang: " << c.args;
    EXPECT_LT(seconds, 30) << c.args;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace dtrain::testing
