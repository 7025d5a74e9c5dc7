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
                            "--optimizer adamw --lr 3e-3 --weight-decay 0.1 --clip-grad-norm 0.5 --max-steps 12 "
                            "--log-every 1 ";
const std::string kPipelineLlama = "--model llama --kv-heads 2 --ffn-dim 64 ";
const std::string kPipelineGpt2 = "--model gpt2 ";

// What rank 0's --metrics-jsonl recorded: each step's loss, then the final validation loss.
struct RunLosses {
  std::vector<double> steps;
  double val = NAN;
};

RunLosses lossesOf(const std::string& path) {
  RunLosses out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record["event"] == "step") out.steps.push_back(record["loss"].get<double>());
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
  ASSERT_EQ(a.steps.size(), 12u) << what;
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
  for (const std::string& model : {kPipelineGpt2, kPipelineLlama}) {
    const RunLosses one = trained(1, model + kPipelineLm, dir, "one");
    const std::vector<std::pair<int, std::string>> runs = {
        {2, "--pp 2 --microbatches 4 --pp-schedule 1f1b"},
        {2, "--pp 2 --microbatches 4 --pp-schedule gpipe"},
        {2, "--pp 2 --microbatches 4 --pp-schedule zb-h1"},
        {2, "--pp 2 --microbatches 4 --pp-schedule interleaved-1f1b --virtual-stages 2"},
        {4, "--pp 4 --microbatches 4 --pp-schedule 1f1b"},
    };
    for (const auto& [ranks, pipeline] : runs) {
      expectSameLosses(one, trained(ranks, model + kPipelineLm + pipeline, dir, "pp"), 2e-6, model + pipeline);
    }
  }
}

// pp 2 x dp 2 (ZeRO-1 and, untied, ZeRO-2) against dp 2, and pp 2 x tp 2
// against tp 2: the pipeline composes with the other two axes.
TEST(PipelineRunsTest, PipelinesComposeWithDataAndTensorParallelism) {
  TempDir dir("dtrain-pp-compose");
  const RunLosses dp = trained(2, kPipelineLlama + kPipelineLm + "--shard optimizer", dir, "dp");
  expectSameLosses(dp, trained(4, kPipelineLlama + kPipelineLm + "--shard optimizer --pp 2 --microbatches 2", dir, "pp-dp"), 2e-6,
                   "pp 2 x dp 2, --shard optimizer");
  const std::string untied = "--tie-embeddings off --shard gradients ";
  const RunLosses dp_untied = trained(2, kPipelineLlama + kPipelineLm + untied, dir, "dp-untied");
  expectSameLosses(dp_untied,
                   trained(4,
                           kPipelineLlama + kPipelineLm + untied +
                               "--pp 2 --microbatches 2 --pp-schedule interleaved-1f1b --virtual-stages 2",
                           dir, "pp-dp-untied"),
                   2e-6, "pp 2 x dp 2 interleaved, --shard gradients");
  const RunLosses tp = trained(2, kPipelineGpt2 + kPipelineLm + "--tp 2", dir, "tp");
  expectSameLosses(tp, trained(4, kPipelineGpt2 + kPipelineLm + "--tp 2 --pp 2 --microbatches 2", dir, "pp-tp"), 2e-6,
                   "pp 2 x tp 2");
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

// One line naming the numbers, exit 2, before any rank trains.
TEST(PipelineRunsTest, BadPipelinesExitTwoNamingThem) {
  const std::string solo = "env -u RANK -u WORLD_SIZE " + dtrainBin() + " train --cache-dir " +
                           testing::corpusCacheDir() + " " + kPipelineLlama + kPipelineLm;
  struct Case {
    std::string args, expected;
  };
  const Case cases[] = {
      {"--pp 8", "8 pipeline stages (--pp x --virtual-stages) for a model of 4 blocks: expected at most one stage "
                 "per block"},
      {"--pp 4 --microbatches 2",
       "--microbatches 2 with --pp 4 and --pp-schedule 1f1b: fewer micro-batches than stages never fill the pipeline"},
      {"--layers 6 --pp 2 --microbatches 4 --pp-schedule interleaved-1f1b --virtual-stages 2",
       "--virtual-stages 2 x --pp 2 = 4 stages do not divide the model's 6 blocks equally"},
      {"--pp 2 --pp-split 1,2", "--pp-split '1,2' lists 2 stages of 3 blocks; expected 2 comma-separated block counts "
                                "of at least 1 that add up to the model's 4 blocks"},
      {"--pp 2 --microbatches 3", "--batch-size 4 does not split into --microbatches 3 equal micro-batches"},
      {"--pp 2 --shard full", "--pp 2 with --shard full"},
      {"--pp 2 --shard gradients", "--pp 2 with --shard gradients and a tied head"},
      {"--pp 2 --checkpoint-dir /tmp/x", "--checkpoint-dir with --pp 2"},
      {"--microbatches 4", "--microbatches, --virtual-stages and --pp-split shape a pipeline; with --pp 1 there is none"},
      {"--pp 2", "--pp 2 x --tp 1 x --dp-replicate 1 = 2 ranks does not divide the world of 1"},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(testing::exitsTwoSaying(runCommand(solo + c.args + " 2>&1", 60), c.expected)) << c.args;
  }
  auto cnn = runCommand(dtrainBin() + " train --model cnn --dataset synthetic --pp 2 2>&1", 60);
  EXPECT_TRUE(testing::exitsTwoSaying(cnn, "--pp 2 with --model cnn: pipeline parallelism splits the transformer "
                                           "language models' blocks"))
      << cnn.output;
  auto world = runCommand(testing::launchTrain(3, kPipelineLlama + kPipelineLm + "--pp 2"), 120);
  EXPECT_TRUE(testing::exitsTwoSaying(world, "does not divide the world of 3 ranks")) << world.output;
}

}  // namespace
}  // namespace dtrain
