// The text exposition format (exporter/prometheus_text.h).
#include "metrics/prometheus_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/error.h"

namespace dtrain::metrics {
namespace {

TEST(PrometheusTextTest, RendersHelpTypeAndSamplesPerFamily) {
  MetricFamily util("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", MetricType::kGauge);
  util.add({{"gpu", "0"}, {"UUID", "GPU-a"}}, 87).add({{"gpu", "1"}, {"UUID", "GPU-b"}}, 12.5);
  MetricFamily xids("dtrain_gpu_xid_events_total", "Xids.", MetricType::kCounter);
  xids.add({}, 3);
  EXPECT_EQ(render({util, xids}),
            "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
            "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\"} 87\n"
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\"} 12.5\n"
            "# HELP dtrain_gpu_xid_events_total Xids.\n"
            "# TYPE dtrain_gpu_xid_events_total counter\n"
            "dtrain_gpu_xid_events_total 3\n");
}

TEST(PrometheusTextTest, LeavesOutFamiliesWithoutSamples) {
  MetricFamily empty("dtrain_empty", "Nothing.", MetricType::kGauge);
  MetricFamily one("dtrain_one", "One.", MetricType::kUntyped);
  one.add({}, 1);
  EXPECT_EQ(render({empty, one}), "# HELP dtrain_one One.\n# TYPE dtrain_one untyped\ndtrain_one 1\n");
}

TEST(PrometheusTextTest, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(escapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(escapeHelp("a\\b\"c\nd"), "a\\\\b\"c\\nd");
  MetricFamily f("dtrain_x", "line one\nline two \\ end", MetricType::kGauge);
  f.add({{"model", "NVIDIA \"H100\"\n80GB"}}, 1);
  EXPECT_EQ(render({f}),
            "# HELP dtrain_x line one\\nline two \\\\ end\n"
            "# TYPE dtrain_x gauge\n"
            "dtrain_x{model=\"NVIDIA \\\"H100\\\"\\n80GB\"} 1\n");
}

TEST(PrometheusTextTest, FormatsValuesExactlyAndSpecialValuesAsPrometheusSpellsThem) {
  EXPECT_EQ(formatValue(0), "0");
  EXPECT_EQ(formatValue(612.345), "612.345");
  EXPECT_EQ(formatValue(9876543210.0), "9876543210");
  EXPECT_EQ(formatValue(-2.5), "-2.5");
  EXPECT_EQ(formatValue(0.1), "0.1");
  EXPECT_EQ(formatValue(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(formatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(formatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(std::stod(formatValue(1.0 / 3)), 1.0 / 3);  // round-trips
}

TEST(PrometheusTextTest, RejectsBadNamesLabelsAndDuplicateFamilies) {
  EXPECT_THROW(MetricFamily("1abc", "h", MetricType::kGauge), ConfigError);
  EXPECT_THROW(MetricFamily("a-b", "h", MetricType::kGauge), ConfigError);
  EXPECT_NO_THROW(MetricFamily("job:rate5m", "h", MetricType::kGauge));
  MetricFamily f("dtrain_x", "h", MetricType::kGauge);
  EXPECT_THROW(f.add({{"a:b", "v"}}, 1), ConfigError);
  EXPECT_THROW(f.add({{"__name__", "v"}}, 1), ConfigError);
  EXPECT_THROW(f.add({{"gpu", "0"}, {"gpu", "1"}}, 1), ConfigError);
  EXPECT_NO_THROW(f.add({{"modelName", "x"}, {"UUID", "y"}}, 1));
  MetricFamily g("dtrain_x", "again", MetricType::kGauge);
  EXPECT_THROW(render({f, g}), ConfigError);
}

}  // namespace
}  // namespace dtrain::metrics
