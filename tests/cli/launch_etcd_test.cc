// `dtrain launch --rdzv-backend etcd` end to end: three agents training over
// Gloo on loopback, the job store a real three-member etcd cluster. Losing
// an etcd member, then the first training node (which would host the store
// under c10d), the job goes on with the survivors from the last checkpoint.
// Skips, saying why, where etcd is not installed.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "tests/support/background_process.h"
#include "tests/support/command.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::testing {
namespace {

using namespace std::chrono_literals;

const std::string kTinyGpt =
    "--model gpt2 --layers 2 --dim 32 --heads 4 --seq-len 32 --vocab-size 320 --dataset text --tokenizer byte "
    "--batch-size 4 --seed 5 --progress lines --log-every 10 --backend gloo --eval-batches 8 ";

bool waitFor(const std::string& path, const std::string& text, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (contains(readFile(path), text)) return true;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

TEST(LaunchEtcdTest, TheJobSurvivesLosingAnEtcdMemberAndThenTheFirstNode) {
  if (!EtcdCluster::available()) GTEST_SKIP() << EtcdCluster::skipReason();
  EtcdCluster etcd(3);
  TempDir dir("dtrain-launch-etcd");
  const std::string checkpoints = dir.path() + "/ckpt";
  const std::string agent =
      dtrainBin() + " launch --nnodes 2:3 --nproc-per-node 1 --max-restarts 5 --monitor-interval 0.1 "
      "--rdzv-backend etcd --rdzv-endpoint " + etcd.clientEndpoints() +
      " --rdzv-id etcdjob --rdzv-conf last_call_timeout=2 " +  // the default keep-alive (2 s x 3)
      dtrainBin() + " train --cache-dir " + dir.path() + "/cache " + kTinyGpt +
      "--max-steps 160 --checkpoint-every 20 --checkpoint-dir " + checkpoints + " --resume auto --timeout 30";
  std::vector<std::unique_ptr<BackgroundProcess>> nodes;
  std::vector<std::string> logs;
  for (int node = 0; node < 3; ++node) {
    logs.push_back(dir.path() + "/node" + std::to_string(node) + ".log");
    // Its own session: killing it is losing the node (the agent and its workers).
    nodes.push_back(std::make_unique<BackgroundProcess>(
        std::vector<std::string>{"setsid", "--wait", "sh", "-c", "echo $$ > " + logs.back() + ".sid; exec " + agent},
        std::map<std::string, std::string>{},
        logs.back()));
    if (node == 0) std::this_thread::sleep_for(1s);  // node 0 joins first: under c10d it would host the store
  }
  auto all = [&] {
    std::string text;
    for (size_t i = 0; i < logs.size(); ++i) text += "---- node" + std::to_string(i) + "\n" + readFile(logs[i]);
    return text;
  };
  ASSERT_TRUE(waitFor(logs[0], "node 0 of 3", 120s)) << all();
  ASSERT_TRUE(waitFor(logs[0], "step 40/", 180s)) << all();

  // One etcd member goes: two of three keep the quorum, nothing notices.
  etcd.kill(0);
  ASSERT_TRUE(waitFor(logs[0], "step 60/", 120s)) << "training stalled after losing one etcd member\n" << all();

  // The first training node goes, agent and worker; the survivors re-form
  // as a world of 2 within the default settings' 10 s (a loaded 2-core
  // machine gets twice that).
  ASSERT_EQ(runCommand("pkill -KILL -s $(cat " + logs[0] + ".sid)").exit_code, 0);
  const auto killed_at = std::chrono::steady_clock::now();
  bool reformed = false;
  while (!reformed && std::chrono::steady_clock::now() - killed_at < 120s) {
    reformed = contains(readFile(logs[1]) + readFile(logs[2]), "of 2, ranks");
    if (!reformed) std::this_thread::sleep_for(100ms);
  }
  const double reform_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_TRUE(reformed) << all();
  EXPECT_LT(reform_s, 20.0) << all();
  std::printf("first node killed; the survivors re-formed as 2 after %.1f s (default keep-alive 2 s x 3)\n", reform_s);
  for (int node : {1, 2}) {
    EXPECT_EQ(nodes[node]->waitForExit(300s), 0) << all();
  }
  const std::string survivors = readFile(logs[1]) + readFile(logs[2]);
  EXPECT_TRUE(contains(survivors, "of 2, ranks")) << "the survivors formed a world of 2\n" << all();
  EXPECT_TRUE(contains(survivors, "resuming from " + checkpoints)) << all();
  EXPECT_TRUE(contains(survivors, "step 160/160")) << all();
  if (std::getenv("DTRAIN_TEST_SHOW_LOGS")) std::fputs(all().c_str(), stdout);
}

TEST(LaunchEtcdTest, WithoutAnEndpointTheEtcdBackendIsAClearError) {
  auto r = runCommand(dtrainBin() + " launch --nnodes 2 --rdzv-backend etcd --no-python true", 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--rdzv-backend etcd needs --rdzv-endpoint")) << r.output;
  r = runCommand(dtrainBin() + " launch --nnodes 2 --rdzv-backend etcd --rdzv-endpoint 127.0.0.1:2379,,x "
                 "--no-python true", 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--rdzv-endpoint")) << r.output;
  r = runCommand(dtrainBin() + " launch --nnodes 2 --rdzv-backend etcd-v2 --rdzv-endpoint 127.0.0.1:2379 "
                 "--no-python true", 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "etcd-v2 is not supported")) << r.output;
}

}  // namespace
}  // namespace dtrain::testing
