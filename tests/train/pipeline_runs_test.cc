// `dtrain train --pp` as real processes on loopback (Gloo): every schedule
// trains the tiny gpt2 and llama to the losses of one rank (fp32 rounding),
// composed with data parallelism and tensor parallelism, and bad
// pipelines exit 2 naming what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/bad_input.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"
#include "tests/train/train_runs.h"

namespace dtrain {
namespace {
using testing::contains;
using testing::dtrainBin;
using testing::runCommand;
using testing::TempDir;

// Four blocks, so that pp 4 and two virtual stages of pp 2 have one each.
const std::string kPipelineLm = "--layers 4 --dim 32 --heads 4 --seq-len 32 --vocab-size 320 --dataset text "
                            "--tokenizer byte --batch-size 4 --seed 5 --progress none --eval-batches 2 "
                            "--optimizer adamw --lr 3e-3 --weight-decay 0.1 --clip-grad-norm 0.5 --max-steps 8 "
                            "--log-every 1 "
                            // The schedule these tolerances were set for (language models' own defaults warm up
                            // faster and with beta2 0.95, which a few ulps between layouts grow on more).
                            "--beta2 0.999 --warmup 0.2 --min-lr 0 ";
const std::string kPipelineLlama = "--model llama --kv-heads 2 --ffn-dim 64 ";
const std::string kPipelineGpt2 = "--model gpt2 ";

// What rank 0's --metrics-jsonl recorded: each step's loss, then the final validation loss.
struct RunLosses {
  std::vector<double> steps;
  double val = NAN;
  std::vector<double> bubbles;  // each step record's pp_bubble (pipelines)
};

RunLosses lossesOf(const std::string& path) {
  RunLosses out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record["event"] == "step") out.steps.push_back(record["loss"].get<double>());
    if (record["event"] == "step" && record.contains("pp_bubble")) {
      out.bubbles.push_back(record["pp_bubble"].get<double>());
    }
    if (record["event"] == "summary") out.val = record["val_loss"].get<double>();
  }
  return out;
}

// A run of `ranks` processes; its losses.
RunLosses trained(int ranks, const std::string& args, const TempDir& dir, const std::string& name) {
  const std::string metrics = dir / (name + ".jsonl");
  std::remove(metrics.c_str());  // --metrics-jsonl appends
  auto r = runCommand(testing::launchTrain(ranks, args + " --metrics-jsonl " + metrics), 300);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return lossesOf(metrics);
}

// Every step's loss and the validation loss within fp32 rounding.
void expectSameLosses(const RunLosses& a, const RunLosses& b, double tolerance, const std::string& what) {
  ASSERT_EQ(a.steps.size(), 8u) << what;
  ASSERT_EQ(b.steps.size(), a.steps.size()) << what;
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_NEAR(a.steps[i], b.steps[i], tolerance * std::abs(a.steps[i])) << what << ": step " << i + 1;
  }
  EXPECT_NEAR(a.val, b.val, tolerance * std::abs(a.val)) << what << ": validation loss";
}

// Each schedule on two ranks, and 1f1b on four, against one rank: the
// same losses, step by step (a tied head summed across its two stages,
// clipping by the norm over every stage).
TEST(PipelineRunsTest, EveryScheduleTrainsAsOneRankForGpt2AndLlama) {
  TempDir dir("dtrain-pp-schedules");
  const std::string m4 = "--pp 2 --microbatches 4 ";
  const struct {
    std::string model;
    std::vector<std::pair<int, std::string>> runs;
  } cases[] = {
      {kPipelineGpt2, {{2, m4 + "--pp-schedule 1f1b"}, {2, m4 + "--pp-schedule zb-h1"}}},
      {kPipelineLlama,
       {{2, m4 + "--pp-schedule interleaved-1f1b --virtual-stages 2"},
        {4, "--pp 4 --microbatches 4 --pp-schedule gpipe"}}},
  };
  for (const auto& c : cases) {
    const RunLosses one = trained(1, c.model + kPipelineLm, dir, "one");
    EXPECT_TRUE(one.bubbles.empty());
    for (const auto& [ranks, pipeline] : c.runs) {
      const RunLosses pp = trained(ranks, c.model + kPipelineLm + pipeline, dir, "pp");
      expectSameLosses(one, pp, 2e-6, c.model + pipeline);
      // Each step's record has the pipeline's measured bubble: some idle, never all.
      ASSERT_EQ(pp.bubbles.size(), pp.steps.size()) << pipeline;
      for (double b : pp.bubbles) EXPECT_TRUE(b > 0 && b < 1) << pipeline << ": bubble " << b;
    }
  }
}

// pp 2 x dp 2 (interleaved with ZeRO-2, interleaved and zb-h1 with ZeRO-3,
// zb-h1 replicated; untied: sharded gradients hold no whole tied gradient
// to sum) against dp 2, and pp 2 x tp 2 against tp 2: the
// pipeline composes with the other two axes.
TEST(PipelineRunsTest, PipelinesComposeWithDataAndTensorParallelism) {
  TempDir dir("dtrain-pp-compose");
  const std::string untied = "--tie-embeddings off --shard gradients ";
  const RunLosses dp = trained(2, kPipelineLlama + kPipelineLm + untied, dir, "dp");
  expectSameLosses(dp,
                   trained(4,
                           kPipelineLlama + kPipelineLm + untied +
                               "--pp 2 --microbatches 2 --pp-schedule interleaved-1f1b --virtual-stages 2",
                           dir, "pp-dp"),
                   2e-6, "pp 2 x dp 2 interleaved, --shard gradients");
  // ZeRO-3: each stage's units gathered once a step and kept (interleaved:
  // two chunks' blocks on each rank; zb-h1: I and W through kept units).
  for (const std::string& schedule : {std::string("interleaved-1f1b --virtual-stages 2"), std::string("zb-h1")}) {
    expectSameLosses(dp,
                     trained(4,
                             kPipelineLlama + kPipelineLm + "--tie-embeddings off --shard full --pp 2 "
                                                            "--microbatches 2 --pp-schedule " + schedule,
                             dir, "pp-dp-full"),
                     2e-6, "pp 2 x dp 2 " + schedule + ", --shard full");
  }
  // zb-h1, replicated: the data-parallel reduction rides on each rank's
  // last weight gradient, which the last stage computes in its I.
  expectSameLosses(dp,
                   trained(4, kPipelineLlama + kPipelineLm + "--tie-embeddings off --pp 2 --microbatches 2 "
                           "--pp-schedule zb-h1", dir, "pp-dp-zb"),
                   2e-6, "pp 2 x dp 2 zb-h1, replicated");
  const RunLosses tp = trained(2, kPipelineGpt2 + kPipelineLm + "--tp 2", dir, "tp");
  expectSameLosses(tp, trained(4, kPipelineGpt2 + kPipelineLm + "--tp 2 --pp 2 --microbatches 2", dir, "pp-tp"), 2e-6,
                   "pp 2 x tp 2");
}

// A checkpoint of (pp 2, tp 2) resumes on one rank and goes on as the
// never-resharded run does; loaded at (pp 4), (dp 4, ZeRO-1) and
// interleaved (pp 2, V 2), each saves the very tensors it loaded (a tied
// head is written once, by the first stage).
TEST(PipelineRunsTest, CheckpointsMoveBetweenPipelineTensorAndDataLayouts) {
  TempDir full("dtrain-pp-full"), resumed("dtrain-pp-resumed");
  const std::string common = kPipelineGpt2 + kPipelineLm + "--checkpoint-every 4 ";
  const RunLosses whole =
      trained(4, common + "--pp 2 --tp 2 --microbatches 2 --checkpoint-dir " + full.path(), full, "whole");
  ASSERT_EQ(runCommand("cp -r " + testing::checkpointOf(full, 4) + " " + resumed.path() + "/", 10).exit_code, 0);
  const RunLosses again = trained(1, common + "--resume auto --checkpoint-dir " + resumed.path(), resumed, "again");
  ASSERT_EQ(whole.steps.size(), 8u);
  ASSERT_EQ(again.steps.size(), 4u);  // steps 5 .. 8
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(whole.steps[4 + i], again.steps[i], 2e-6 * whole.steps[4 + i]) << i;
  EXPECT_EQ(testing::readCheckpoint(testing::checkpointOf(full, 4)).meta["pp"], 2);

  struct Layout {
    int ranks;
    std::string flags;
  };
  const Layout layouts[] = {{4, "--pp 4 --microbatches 4"},
                            {4, "--shard optimizer"},
                            {2, "--pp 2 --microbatches 4 --pp-schedule interleaved-1f1b --virtual-stages 2"}};
  std::string from = testing::checkpointOf(full, 4);
  for (const Layout& layout : layouts) {
    SCOPED_TRACE(layout.flags);
    TempDir saved("dtrain-pp-layout");
    auto r = runCommand(testing::launchTrain(layout.ranks, kPipelineGpt2 + kPipelineLm + "--max-steps 4 --resume " +
                                                               from + " --checkpoint-dir " + saved.path() + " " +
                                                               layout.flags),
                        300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    testing::expectSameState(testing::checkpointOf(full, 4), testing::checkpointOf(saved, 4));
    const std::string next = testing::makeTempDir("dtrain-pp-chain");
    ASSERT_EQ(runCommand("cp -r " + testing::checkpointOf(saved, 4) + " " + next + "/", 10).exit_code, 0);
    from = next + "/ckpt-000000004";
  }
}

// A middle stage of four SIGKILLed after step 3 of 6: the launcher
// restarts the group, which resumes from the step-3 checkpoint and ends
// with the bits of a run that was never interrupted.
TEST(PipelineRunsTest, KilledMiddleStageRestartsAndEndsAsUninterrupted) {
  TempDir clean("dtrain-pp-clean"), killed("dtrain-pp-killed");
  const std::string common = kPipelineLlama + kPipelineLm +
                             "--pp 4 --microbatches 4 --max-steps 6 --checkpoint-every 3 --resume auto --checkpoint-dir ";
  auto a = runCommand(testing::launchTrain(4, common + clean.path()), 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = runCommand("DTRAIN_FAULT_KILL_AT=2:3 " + testing::launchTrain(4, common + killed.path(), "--max-restarts 1"),
                      300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "kills itself after step 3")) << b.output;
  testing::expectSameState(testing::checkpointOf(clean, 6), testing::checkpointOf(killed, 6));
}

// The plan prints without a launcher: stages, each rank's actions, the
// simulated timeline and the bubble against its formula.
TEST(PipelineRunsTest, PrintScheduleShowsStagesActionsAndBubble) {
  auto r = runCommand(dtrainBin() + " train " + kPipelineLlama + kPipelineLm +
                          "--pp 2 --microbatches 4 --pp-schedule interleaved-1f1b --virtual-stages 2 "
                          "--pp-print-schedule 2>&1",
                      60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "# stages (blocks): 0-0 | 1-1 | 2-2 | 3-3\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0: F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 "
                                 "B2.0 B3.0\n"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "# bubble: 0.111 simulated, 0.111 = (p - 1) / (V M + p - 1)\n")) << r.output;
}

// One line naming the numbers, exit 2, before any rank trains (the plan's
// every refusal: ParallelPlanTest.PipelinesThatCannotRunAreRefused...).
TEST(PipelineRunsTest, BadPipelinesExitTwoNamingThem) {
  const std::string solo = "env -u RANK -u WORLD_SIZE " + dtrainBin() + " train --cache-dir " +
                           testing::corpusCacheDir() + " " + kPipelineLlama + kPipelineLm;
  struct Case {
    std::string args, expected;
  };
  const Case cases[] = {
      {"--pp 8", "8 pipeline stages (--pp x --virtual-stages) for a model of 4 blocks: expected at most one stage "
                 "per block"},
      {"--pp 2 --microbatches 3", "--batch-size 4 does not split into --microbatches 3 equal micro-batches"},
      {"--pp 2", "--pp 2 x --tp 1 x --dp-replicate 1 = 2 ranks does not divide the world of 1"},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(testing::exitsTwoSaying(runCommand(solo + c.args + " 2>&1", 60), c.expected)) << c.args;
  }
  auto world = runCommand(testing::launchTrain(3, kPipelineLlama + kPipelineLm + "--pp 2"), 120);
  EXPECT_TRUE(testing::exitsTwoSaying(world, "does not divide the world of 3 ranks")) << world.output;
}

}  // namespace
}  // namespace dtrain
