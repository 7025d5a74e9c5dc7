// `dtrain launch` across "machines": agents and Gloo workers on the nodes of a
// NetnsBed (network namespaces joined by a bridge, each with its own host
// name and address), with the faults a cluster meets: a silent partition,
// one that heals, a node lost. Skips, saying why, where namespaces cannot
// be made (not root, no iproute2).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <thread>

#include "tests/support/command.h"
#include "tests/support/netns_bed.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A tiny GPT-2 on the embedded corpus (byte tokens): a few ms a step on two CPUs.
const std::string kTinyGpt =
    "--model gpt2 --layers 2 --dim 32 --heads 4 --seq-len 32 --vocab-size 320 --dataset text --tokenizer byte "
    "--batch-size 4 --seed 5 --progress lines --log-every 10 --backend gloo --eval-batches 8 ";

class MultiNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = NetnsBed::unavailableReason();
    if (!reason.empty()) GTEST_SKIP() << "needs network namespaces: " << reason;
  }

  // `dtrain launch <launch_args> dtrain train <train_args>` on `node`,
  // output in <dir>/node<i>.log.
  std::unique_ptr<BackgroundProcess> startAgent(NetnsBed& bed, int node, const std::string& launch_args,
                                                const std::string& train_args) {
    const std::string command = dtrainBin() + " launch " + launch_args + " " + dtrainBin() + " train --cache-dir " +
                                dir_.path() + "/cache" + std::to_string(node) + " " + train_args;
    return bed.start(node, {"sh", "-c", "exec " + command}, {}, logOf(node));
  }
  std::string logOf(int node) const { return dir_.path() + "/node" + std::to_string(node) + ".log"; }

  // Waits until the node's log contains `text`; the time it took, or
  // nullopt after `limit`.
  std::optional<Clock::duration> waitFor(int node, const std::string& text, Clock::duration limit) {
    return waitForAny({node}, text, limit);
  }
  // The same, for the first of several nodes' logs to contain it.
  std::optional<Clock::duration> waitForAny(const std::vector<int>& nodes, const std::string& text,
                                            Clock::duration limit) {
    const auto start = Clock::now();
    while (Clock::now() - start < limit) {
      for (int node : nodes) {
        if (contains(readFile(logOf(node)), text)) return Clock::now() - start;
      }
      std::this_thread::sleep_for(50ms);
    }
    return std::nullopt;
  }

  std::string logs(const NetnsBed& bed) const {
    std::string text;
    for (int i = 0; i < bed.size(); ++i) text += "---- node" + std::to_string(i) + "\n" + readFile(logOf(i));
    return text;
  }

  TempDir dir_{"dtrain-multinode"};
};

TEST_F(MultiNodeTest, TwoNodesTrainOverGlooWithStaticAndC10dRendezvous) {
  NetnsBed bed(2);
  for (const std::string backend : {"static", "c10d"}) {
    const std::string rdzv = backend == "static"
                                 ? "--rdzv-backend static --master-addr node0 --master-port 29500 --node-rank "
                                 : "--rdzv-backend c10d --rdzv-endpoint node0:29400 --rdzv-id two --node-rank ";
    std::vector<std::unique_ptr<BackgroundProcess>> agents;
    for (int node = 0; node < 2; ++node) {
      agents.push_back(startAgent(bed, node, "--nnodes 2 --nproc-per-node 1 " + rdzv + std::to_string(node),
                                  kTinyGpt + "--max-steps 20"));
    }
    for (int node = 0; node < 2; ++node) EXPECT_EQ(agents[node]->waitForExit(120s), 0) << backend << "\n" << logs(bed);
    const std::string all = logs(bed);
    // Both nodes took part, one as node 0 and one as node 1 (c10d ranks
    // follow join order).
    EXPECT_TRUE(contains(readFile(logOf(0)), " of 2, ranks")) << all;
    EXPECT_TRUE(contains(readFile(logOf(1)), " of 2, ranks")) << all;
    EXPECT_TRUE(contains(all, "node 0 of 2") && contains(all, "node 1 of 2")) << all;
    EXPECT_TRUE(contains(all, "step 20")) << all;
  }
}

// A silent partition mid-training: packets to and from node 1 vanish, no
// connection is reset. Every rank reports the lost peer within the
// collective timeout + 5 s, naming its rank, host and address; the agents
// stop (no restarts left) and nothing is left running. (The keep-alive is
// torchrun's 5 s x 3 here, longer than the collective timeout, so that the
// workers' own diagnosis is what is tested: at the default 2 s x 3 the
// agents find the node gone first and stop the workers.)
TEST_F(MultiNodeTest, ASilentPartitionIsReportedByEveryRankWithinTheTimeoutNamingThePeer) {
  NetnsBed bed(2);
  constexpr int kTimeout = 8;
  std::vector<std::unique_ptr<BackgroundProcess>> agents;
  for (int node = 0; node < 2; ++node) {
    agents.push_back(startAgent(bed, node,
                                "--nnodes 2 --nproc-per-node 1 --max-restarts 0 --rdzv-backend c10d "
                                "--rdzv-endpoint node0:29400 --rdzv-id cut "
                                "--rdzv-conf close_timeout=5,keep_alive_interval=5,keep_alive_max_attempt=3",
                                kTinyGpt + "--max-steps 1000000 --timeout " + std::to_string(kTimeout)));
  }
  // Rank 0 (whichever node joined first) prints the progress.
  ASSERT_TRUE(waitForAny({0, 1}, "step 20", 120s)) << logs(bed);
  bed.partition(1);
  const auto cut_at = Clock::now();
  const auto limit = std::chrono::seconds(kTimeout + 5);
  // Node 0 (the store's side) finds node 1's rank silent; node 1 finds the
  // store and node 0's rank out of reach. Both times count from the cut.
  auto seen0 = waitFor(0, " on node1 (" + bed.address(1) + ") stopped publishing progress", limit + 10s);
  std::optional<Clock::duration> seen1;
  if (waitFor(1, "may be cut off from the network: it lost rank ", limit + 10s) &&
      contains(readFile(logOf(1)), " on node0 (" + bed.address(0) + ") on other hosts")) {
    seen1 = Clock::now() - cut_at;
  }
  ASSERT_TRUE(seen0) << logs(bed);
  ASSERT_TRUE(seen1) << logs(bed);
  std::printf("partition reported by node0 after %.1f s, by node1 after %.1f s (timeout %d s)\n",
              std::chrono::duration<double>(*seen0).count(), std::chrono::duration<double>(*seen1).count(), kTimeout);
  EXPECT_LT(*seen0, limit) << logs(bed);
  EXPECT_LT(*seen1, limit) << logs(bed);
  // The agents end the job; no process of it is left on either node.
  for (int node = 0; node < 2; ++node) EXPECT_NE(agents[node]->waitForExit(60s), -1) << logs(bed);
  bed.heal(1);
  for (int node = 0; node < 2; ++node) EXPECT_TRUE(bed.processesIn(node).empty()) << logs(bed);
  if (std::getenv("DTRAIN_TEST_SHOW_LOGS")) std::fputs(logs(bed).c_str(), stdout);
}

// A partition shorter than the timeouts: the collectives stall and resume,
// the agents ride out the store being out of reach, training ends with no
// restart. The keep-alive rides out a silence shorter than its interval x
// attempts less one interval: 5 s here needs torchrun's 5 s x 3 (the
// default 2 s x 3 rides out about 4 s; docs/reliability.md).
TEST_F(MultiNodeTest, APartitionThatHealsWithinTheTimeoutCostsNoRestart) {
  NetnsBed bed(2);
  std::vector<std::unique_ptr<BackgroundProcess>> agents;
  for (int node = 0; node < 2; ++node) {
    agents.push_back(startAgent(bed, node,
                                "--nnodes 2 --nproc-per-node 1 --max-restarts 0 --rdzv-backend c10d "
                                "--rdzv-endpoint node0:29400 --rdzv-id heal "
                                "--rdzv-conf close_timeout=5,keep_alive_interval=5,keep_alive_max_attempt=3",
                                kTinyGpt + "--max-steps 100 --timeout 60"));
  }
  // Rank 0 (whichever node joined first) prints the progress.
  ASSERT_TRUE(waitForAny({0, 1}, "step 20", 120s)) << logs(bed);
  bed.partition(1);
  std::this_thread::sleep_for(5s);
  bed.heal(1);
  for (int node = 0; node < 2; ++node) EXPECT_EQ(agents[node]->waitForExit(180s), 0) << logs(bed);
  const std::string all = logs(bed);
  EXPECT_TRUE(contains(all, "step 100")) << all;
  EXPECT_FALSE(contains(all, "restarting")) << all;
}

// A node lost as a machine is (power off: no FIN, no RST, silence), with the
// default keep-alive and a collective timeout far longer: the survivors'
// agents find the silent node's heartbeat 6 s old, stop their workers
// (blocked in a collective) without waiting for its timeout, drop the node,
// and the two left resume from the last checkpoint and finish.
TEST_F(MultiNodeTest, ALostNodeIsDroppedAndTheSurvivorsResumeFromTheLastCheckpoint) {
  NetnsBed bed(3);
  const std::string checkpoints = dir_.path() + "/ckpt";
  std::vector<std::unique_ptr<BackgroundProcess>> agents;
  for (int node = 0; node < 3; ++node) {
    agents.push_back(startAgent(bed, node,
                                "--nnodes 2:3 --nproc-per-node 1 --max-restarts 3 --rdzv-backend c10d "
                                "--rdzv-endpoint node0:29400 --rdzv-id lost --rdzv-conf last_call_timeout=3,close_timeout=5",
                                kTinyGpt + "--max-steps 100 --timeout 300 --checkpoint-every 20 --checkpoint-dir " +
                                    checkpoints + " --resume auto"));
  }
  ASSERT_TRUE(waitFor(0, "of 3, ranks", 120s)) << logs(bed);
  ASSERT_TRUE(waitForAny({0, 1, 2}, "step 40/", 180s)) << logs(bed);
  bed.powerOff(2);
  const auto lost_at = Clock::now();
  std::optional<Clock::duration> resumed;
  // Whichever survivor is rank 0 of the new round says so.
  if (waitForAny({0, 1}, "resuming from " + checkpoints, 120s)) resumed = Clock::now() - lost_at;
  ASSERT_TRUE(resumed) << logs(bed);
  EXPECT_LT(*resumed, 40s) << "waited for the collective timeout rather than the keep-alive\n" << logs(bed);
  for (int node : {0, 1}) EXPECT_EQ(agents[node]->waitForExit(240s), 0) << logs(bed);
  const std::string survivors = readFile(logOf(0)) + readFile(logOf(1));
  EXPECT_TRUE(contains(survivors, "of 2, ranks")) << logs(bed);
  EXPECT_TRUE(contains(survivors, "step 100/100")) << logs(bed);
  std::printf("node lost; survivors resumed from the last checkpoint after %.1f s (collective timeout 300 s, "
              "keep-alive 2 s x 3)\n", std::chrono::duration<double>(*resumed).count());
  if (std::getenv("DTRAIN_TEST_SHOW_LOGS")) std::fputs(logs(bed).c_str(), stdout);
}

}  // namespace
}  // namespace dtrain::testing
