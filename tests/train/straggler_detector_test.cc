// The straggler decision without processes: the median, each rank's ratio
// to it, the patience before a flag, the reset when a rank recovers
// (train/straggler_detector.h), and the slow-rank drill's setting.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "train/straggler_detector.h"
#include "train/train_settings.h"

namespace dtrain {
namespace {

TEST(StragglerDetectorTest, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(medianOf({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(medianOf({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(medianOf({5}), 5);
  EXPECT_DOUBLE_EQ(medianOf({}), 0);
  // One wild value moves it not at all.
  EXPECT_DOUBLE_EQ(medianOf({1, 1, 1, 1, 100}), 1);
}

TEST(StragglerDetectorTest, RatioIsEachRankOverTheMedian) {
  StragglerDetector d(3, 0.10, 3);
  const StragglerVerdict v = d.observe({0.010, 0.020, 0.010});
  EXPECT_EQ(v.window, 0);
  EXPECT_DOUBLE_EQ(v.median_s, 0.010);
  ASSERT_EQ(v.ratio.size(), 3u);
  EXPECT_DOUBLE_EQ(v.ratio[0], 1.0);
  EXPECT_DOUBLE_EQ(v.ratio[1], 2.0);
  EXPECT_EQ(v.slow_windows, (std::vector<int64_t>{0, 1, 0}));
  EXPECT_TRUE(v.newly_flagged.empty());
}

TEST(StragglerDetectorTest, FlagsARankSlowForPatienceWindowsInARowOnce) {
  StragglerDetector d(3, 0.10, 3);
  const std::vector<double> slow_rank_2{1.0, 1.0, 1.5};
  EXPECT_TRUE(d.observe(slow_rank_2).newly_flagged.empty());
  EXPECT_TRUE(d.observe(slow_rank_2).newly_flagged.empty());
  const StragglerVerdict third = d.observe(slow_rank_2);
  EXPECT_EQ(third.newly_flagged, std::vector<int>{2});
  EXPECT_EQ(third.slow_windows[2], 3);
  EXPECT_TRUE(d.flagged(2));
  EXPECT_FALSE(d.flagged(0));
  // Still slow: flagged already, not again.
  EXPECT_TRUE(d.observe(slow_rank_2).newly_flagged.empty());
  EXPECT_TRUE(d.flagged(2));
}

TEST(StragglerDetectorTest, AWindowAtNormalSpeedResetsTheCount) {
  StragglerDetector d(2, 0.10, 3);
  // Two ranks: the median is their mean; 1.5 against 1.0 is 1.2x it.
  d.observe({1.0, 1.5});
  d.observe({1.0, 1.5});
  const StragglerVerdict normal = d.observe({1.0, 1.02});
  EXPECT_EQ(normal.slow_windows[1], 0);
  EXPECT_TRUE(normal.newly_flagged.empty());
  d.observe({1.0, 1.5});
  EXPECT_TRUE(d.observe({1.0, 1.5}).newly_flagged.empty());
  EXPECT_EQ(d.observe({1.0, 1.5}).newly_flagged, std::vector<int>{1});
}

TEST(StragglerDetectorTest, AFlaggedRankThatRecoversIsUnflaggedAndCountsAgainFromZero) {
  StragglerDetector d(3, 0.10, 2);
  d.observe({1.0, 2.0, 1.0});
  ASSERT_EQ(d.observe({1.0, 2.0, 1.0}).newly_flagged, std::vector<int>{1});
  const StragglerVerdict back = d.observe({1.0, 1.0, 1.0});
  EXPECT_EQ(back.recovered, std::vector<int>{1});
  EXPECT_FALSE(d.flagged(1));
  EXPECT_TRUE(d.observe({1.0, 2.0, 1.0}).newly_flagged.empty());
  EXPECT_EQ(d.observe({1.0, 2.0, 1.0}).newly_flagged, std::vector<int>{1});
}

TEST(StragglerDetectorTest, JustBelowTheThresholdIsNotSlow) {
  StragglerDetector d(3, 0.10, 1);
  EXPECT_TRUE(d.observe({1.0, 1.09, 1.0}).newly_flagged.empty());
  EXPECT_EQ(d.observe({1.0, 1.11, 1.0}).newly_flagged, std::vector<int>{1});
}

TEST(StragglerDetectorTest, FasterRanksAreNeverFlagged) {
  StragglerDetector d(3, 0.10, 1);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(d.observe({0.2, 1.0, 1.0}).newly_flagged.empty());
}

TEST(StragglerDetectorTest, AWindowWithNothingMeasuredChangesNothing) {
  StragglerDetector d(2, 0.10, 2);
  d.observe({1.0, 2.0});
  const StragglerVerdict empty = d.observe({0, 0});
  EXPECT_EQ(empty.ratio, (std::vector<double>{1, 1}));
  EXPECT_EQ(empty.slow_windows[1], 1);
  EXPECT_EQ(d.observe({1.0, 2.0}).newly_flagged, std::vector<int>{1});
}

TEST(StragglerDetectorTest, RefusesWhatCannotBeJudged) {
  EXPECT_THROW(StragglerDetector(0, 0.1, 3), ConfigError);
  EXPECT_THROW(StragglerDetector(2, 0, 3), ConfigError);
  EXPECT_THROW(StragglerDetector(2, -0.5, 3), ConfigError);
  EXPECT_THROW(StragglerDetector(2, 0.1, 0), ConfigError);
  StragglerDetector d(2, 0.1, 3);
  EXPECT_THROW(d.observe({1.0, 2.0, 3.0}), ConfigError);
}

TEST(SlowRankDrillTest, ParsesRankAndFraction) {
  const SlowRankDrill drill = parseSlowRankDrill("1:0.5");
  EXPECT_EQ(drill.rank, 1);
  EXPECT_DOUBLE_EQ(drill.fraction, 0.5);
}

TEST(SlowRankDrillTest, MalformedValuesNameTheVariable) {
  for (const std::string bad : {"1", "1:", ":0.5", "x:0.5", "1:abc", "1:0", "1:-0.5", "-1:0.5", "1:0.5:2", "1:11"}) {
    try {
      parseSlowRankDrill(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("DTRAIN_FAULT_SLOW_RANK"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace dtrain
