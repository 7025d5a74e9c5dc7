// Pipeline schedules as data (parallel/pipeline_schedule.h): every schedule
// of pp <= 8, M <= 16 and V <= 4 is complete and deadlock-free in the
// simulator; 1f1b and interleaved-1f1b reach the textbook bubble
// (pp - 1) / (V M + pp - 1), zb-h1 the zero-bubble paper's (pp - 1) /
// (3 M + pp - 1) with equal F, I and W; 1f1b keeps at most
// pp - r micro-batches in flight; the lists print as expected; broken lists
// and bad sizes are named.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "parallel/pipeline_schedule.h"
#include "tests/support/text.h"

namespace dtrain {
namespace {

constexpr PipelineScheduleKind kKinds[] = {PipelineScheduleKind::kGpipe, PipelineScheduleKind::k1F1B,
                                           PipelineScheduleKind::kInterleaved1F1B, PipelineScheduleKind::kZeroBubbleH1};

std::string errorOf(PipelineScheduleKind kind, int pp, int m, int v) {
  return testing::configErrorOf([&] { buildPipelineSchedule(kind, pp, m, v); });
}

bool valid(PipelineScheduleKind kind, int pp, int m, int v) {
  if (v > 1 && kind != PipelineScheduleKind::kInterleaved1F1B) return false;
  if (kind != PipelineScheduleKind::kGpipe && m < pp) return false;
  return kind != PipelineScheduleKind::kInterleaved1F1B || m % pp == 0;
}

TEST(PipelineScheduleTest, EveryScheduleUpToEightStagesIsCompleteAndNeverDeadlocks) {
  int checked = 0;
  for (PipelineScheduleKind kind : kKinds) {
    for (int pp = 1; pp <= 8; ++pp) {
      for (int m = 1; m <= 16; ++m) {
        for (int v = 1; v <= 4; ++v) {
          if (!valid(kind, pp, m, v)) {
            EXPECT_NE(errorOf(kind, pp, m, v), "") << pipelineScheduleName(kind) << " pp " << pp << " M " << m << " V " << v;
            continue;
          }
          const PipelineSchedule s = buildPipelineSchedule(kind, pp, m, v);
          const std::string what = std::string(pipelineScheduleName(kind)) + " pp " + std::to_string(pp) + " M " +
                                   std::to_string(m) + " V " + std::to_string(v);
          EXPECT_EQ(checkPipelineSchedule(s), "") << what;
          const ScheduleSimulation sim = simulatePipelineSchedule(s);
          ASSERT_FALSE(sim.deadlock) << what << ": " << sim.why << "\n" << formatPipelineSchedule(s);
          EXPECT_GE(sim.bubble, 0.0) << what;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 496);
}

TEST(PipelineScheduleTest, OneForwardOneBackwardAndInterleavedReachTheTextbookBubble) {
  for (int pp = 2; pp <= 8; ++pp) {
    for (int m = pp; m <= 16; ++m) {
      const ScheduleSimulation one = simulatePipelineSchedule(buildPipelineSchedule(PipelineScheduleKind::k1F1B, pp, m));
      EXPECT_NEAR(one.bubble, theoreticalPipelineBubble(pp, m), 1e-9) << "1f1b pp " << pp << " M " << m;
      const ScheduleSimulation gpipe = simulatePipelineSchedule(buildPipelineSchedule(PipelineScheduleKind::kGpipe, pp, m));
      EXPECT_NEAR(gpipe.bubble, theoreticalPipelineBubble(pp, m), 1e-9) << "gpipe pp " << pp << " M " << m;
      const ScheduleSimulation zb =
          simulatePipelineSchedule(buildPipelineSchedule(PipelineScheduleKind::kZeroBubbleH1, pp, m));
      EXPECT_LT(zb.bubble, one.bubble) << "zb-h1 pp " << pp << " M " << m;
      EXPECT_NEAR(zb.bubble, (pp - 1.0) / (3.0 * m + pp - 1.0), 1e-9) << "zb-h1 pp " << pp << " M " << m;
      if (m % pp != 0) continue;
      for (int v = 2; v <= 4; ++v) {
        const ScheduleSimulation inter =
            simulatePipelineSchedule(buildPipelineSchedule(PipelineScheduleKind::kInterleaved1F1B, pp, m, v));
        EXPECT_NEAR(inter.bubble, theoreticalPipelineBubble(pp, m, v), 1e-9)
            << "interleaved pp " << pp << " M " << m << " V " << v;
      }
    }
  }
}

// The most micro-batches a rank holds activations for at once.
int mostInFlight(const std::vector<PipelineAction>& list) {
  int now = 0, most = 0;
  for (const PipelineAction& a : list) {
    if (a.op == PipelineAction::Op::kForward) most = std::max(most, ++now);
    if (a.op == PipelineAction::Op::kBackward || a.op == PipelineAction::Op::kBackwardInput) --now;
  }
  return most;
}

TEST(PipelineScheduleTest, OneForwardOneBackwardHoldsAtMostPpMinusRankMicroBatches) {
  const int pp = 4, m = 12;
  for (PipelineScheduleKind kind : {PipelineScheduleKind::k1F1B, PipelineScheduleKind::kZeroBubbleH1}) {
    const PipelineSchedule s = buildPipelineSchedule(kind, pp, m);
    for (int r = 0; r < pp; ++r) EXPECT_EQ(mostInFlight(s.ranks[r]), pp - r) << pipelineScheduleName(kind) << " rank " << r;
  }
  const PipelineSchedule gpipe = buildPipelineSchedule(PipelineScheduleKind::kGpipe, pp, m);
  EXPECT_EQ(mostInFlight(gpipe.ranks[0]), m) << "gpipe holds every micro-batch";
}

TEST(PipelineScheduleTest, SchedulesPrintAsListsAndTimelines) {
  EXPECT_EQ(formatPipelineSchedule(buildPipelineSchedule(PipelineScheduleKind::k1F1B, 2, 4)),
            "# 1f1b: pp 2, 4 micro-batches; F forward, B backward, I input gradient, W weight gradient\n"
            "rank 0: F0 F1 B0 F2 B1 F3 B2 B3\n"
            "rank 1: F0 B0 F1 B1 F2 B2 F3 B3\n");
  EXPECT_EQ(formatPipelineSchedule(buildPipelineSchedule(PipelineScheduleKind::kZeroBubbleH1, 2, 3)),
            "# zb-h1: pp 2, 3 micro-batches; F forward, B backward, I input gradient, W weight gradient\n"
            "rank 0: F0 F1 I0 F2 I1 W0 W1 I2 W2\n"
            "rank 1: F0 I0 F1 I1 F2 W0 I2 W1 W2\n");
  EXPECT_EQ(formatPipelineSchedule(buildPipelineSchedule(PipelineScheduleKind::kInterleaved1F1B, 2, 2, 2)),
            "# interleaved-1f1b: pp 2, 2 micro-batches, 2 stages per rank (F3.1: chunk 1); F forward, B backward, "
            "I input gradient, W weight gradient\n"
            "rank 0: F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0\n"
            "rank 1: F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 B1.0\n");
  EXPECT_EQ(formatPipelineTimeline(buildPipelineSchedule(PipelineScheduleKind::k1F1B, 2, 2)),
            "# 1f1b timeline (F 1, I 1, W 1 per stage): bubble 33.3%\n"
            "rank 0: F0 F1 .  .  B0 B0 .  B1 B1\n"
            "rank 1: .  F0 B0 B0 F1 B1 B1 .  . \n");
}

TEST(PipelineScheduleTest, BrokenListsAndDeadlocksAreNamed) {
  PipelineSchedule s = buildPipelineSchedule(PipelineScheduleKind::k1F1B, 2, 2);
  // rank 1 runs micro-batch 1 first: rank 0 waits for its B0, which rank 1
  // runs only after F1, which waits for rank 0's F1, after B0.
  s.ranks[0] = {{PipelineAction::Op::kForward, 0, 0},
                {PipelineAction::Op::kBackward, 0, 0},
                {PipelineAction::Op::kForward, 1, 0},
                {PipelineAction::Op::kBackward, 1, 0}};
  s.ranks[1] = {{PipelineAction::Op::kForward, 1, 0},
                {PipelineAction::Op::kForward, 0, 0},
                {PipelineAction::Op::kBackward, 0, 0},
                {PipelineAction::Op::kBackward, 1, 0}};
  EXPECT_EQ(checkPipelineSchedule(s), "");
  const ScheduleSimulation sim = simulatePipelineSchedule(s);
  EXPECT_TRUE(sim.deadlock);
  EXPECT_EQ(sim.why, "deadlock: rank 0 waits at B0 (action 2 of 4); rank 1 waits at F1 (action 1 of 4)");

  s.ranks[1] = {{PipelineAction::Op::kBackward, 0, 0},
                {PipelineAction::Op::kForward, 0, 0},
                {PipelineAction::Op::kForward, 1, 0},
                {PipelineAction::Op::kBackward, 1, 0}};
  EXPECT_EQ(checkPipelineSchedule(s), "rank 1's F0 runs after its backward");
  s.ranks[1] = {{PipelineAction::Op::kForward, 0, 0},
                {PipelineAction::Op::kBackward, 0, 0},
                {PipelineAction::Op::kForward, 1, 0}};
  EXPECT_EQ(checkPipelineSchedule(s), "rank 1's B1: expected one B, or one I and one W; found 0 B, 0 I, 0 W");
}

TEST(PipelineScheduleTest, BadSizesAreAConfigErrorNamingTheFlags) {
  EXPECT_EQ(errorOf(PipelineScheduleKind::k1F1B, 4, 2, 1),
            "--microbatches 2 with --pp 4 and --pp-schedule 1f1b: fewer micro-batches than stages never fill the "
            "pipeline; expected --microbatches >= 4 (or --pp-schedule gpipe)");
  EXPECT_EQ(errorOf(PipelineScheduleKind::kInterleaved1F1B, 4, 6, 2),
            "--microbatches 6 with --pp 4 and --pp-schedule interleaved-1f1b: the micro-batches go through each "
            "chunk in groups of pp; expected a multiple of 4");
  EXPECT_EQ(errorOf(PipelineScheduleKind::k1F1B, 2, 4, 2),
            "--virtual-stages 2 with --pp-schedule 1f1b: only interleaved-1f1b runs several stages per rank; "
            "expected --virtual-stages 1 or --pp-schedule interleaved-1f1b");
  EXPECT_EQ(errorOf(PipelineScheduleKind::kGpipe, 0, 4, 1), "--pp 0: expected at least 1 pipeline stage");
  EXPECT_EQ(errorOf(PipelineScheduleKind::kGpipe, 2, 0, 1), "--microbatches 0: expected at least 1 micro-batch per step");
  EXPECT_EQ(errorOf(PipelineScheduleKind::kGpipe, 2, 2, 0), "--virtual-stages 0: expected at least 1 stage per rank");
  EXPECT_EQ(parsePipelineSchedule("zb-h1"), PipelineScheduleKind::kZeroBubbleH1);
  EXPECT_EQ(testing::configErrorOf([] { parsePipelineSchedule("zero-bubble"); }),
            "--pp-schedule zero-bubble: expected gpipe, 1f1b, interleaved-1f1b or zb-h1");
}

// The costliest stage as cheap as whole blocks allow, then the most even
// cut; the head's cost moves blocks off the last stage.
TEST(PipelineStagesTest, BalancedStagesMinimiseTheCostliestStage) {
  using S = std::vector<StageBlocks>;
  EXPECT_EQ(balancePipelineStages(8, 2, 1, 0, 0), (S{{0, 4}, {4, 8}}));
  EXPECT_EQ(balancePipelineStages(5, 2, 1, 0, 0), (S{{0, 3}, {3, 5}}));
  EXPECT_EQ(balancePipelineStages(8, 4, 1, 0, 0), (S{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  EXPECT_EQ(balancePipelineStages(4, 4, 1, 0, 0), (S{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  // A head as costly as two blocks: the last stage gives two up.
  EXPECT_EQ(balancePipelineStages(10, 2, 1, 0, 2), (S{{0, 6}, {6, 10}}));
  EXPECT_EQ(balancePipelineStages(32, 2, 1.0, 0.0, 2.4), (S{{0, 17}, {17, 32}}));
  EXPECT_EQ(formatPipelineStages(balancePipelineStages(7, 3, 1, 0, 0)), "0-2 | 3-4 | 5-6");
  EXPECT_EQ(testing::configErrorOf([] { balancePipelineStages(3, 4, 1, 0, 0); }),
            "4 pipeline stages (--pp x --virtual-stages) for a model of 3 blocks: expected at most one stage per "
            "block");
}

TEST(PipelineStagesTest, AnExplicitSplitMustCoverTheBlocks) {
  using S = std::vector<StageBlocks>;
  EXPECT_EQ(parsePipelineSplit("5,5,6", 16, 3), (S{{0, 5}, {5, 10}, {10, 16}}));
  EXPECT_EQ(testing::configErrorOf([] { parsePipelineSplit("5,5,5", 16, 3); }),
            "--pp-split '5,5,5' lists 3 stages of 15 blocks; expected 3 comma-separated block counts of at least 1 "
            "that add up to the model's 16 blocks");
  EXPECT_EQ(testing::configErrorOf([] { parsePipelineSplit("8,8", 16, 3); }),
            "--pp-split '8,8' lists 2 stages of 16 blocks; expected 3 comma-separated block counts of at least 1 "
            "that add up to the model's 16 blocks");
  EXPECT_EQ(testing::configErrorOf([] { parsePipelineSplit("8,x", 16, 2); }),
            "--pp-split '8,x': 'x' is not a block count; expected 2 comma-separated block counts of at least 1 that "
            "add up to the model's 16 blocks");
  EXPECT_EQ(testing::configErrorOf([] { parsePipelineSplit("16,0", 16, 2); }),
            "--pp-split '16,0': '0' is not a block count; expected 2 comma-separated block counts of at least 1 that "
            "add up to the model's 16 blocks");
}

}  // namespace
}  // namespace dtrain
