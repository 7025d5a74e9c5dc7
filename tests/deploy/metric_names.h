// The metric names dtrain serves, and a scanner that finds metric names in a
// PromQL expression, for tests of the Prometheus/Grafana files in deploy/.
#pragma once

#include <set>
#include <string>

namespace dtrain::testing {

// `dtrain exporter`: dcgm-exporter's names plus dtrain_gpu_*.
const std::set<std::string>& exporterMetricNames();
// Training jobs (--metrics-port): dtrain_train_*; a histogram is listed as its
// _bucket, _sum and _count series, which are what PromQL can select.
const std::set<std::string>& trainingMetricNames();

// Identifiers in `expr` that look like dtrain's metric names (DCGM_FI_*,
// dtrain_*), outside quoted strings, so label values and legends never count,
// and not label names (dtrain_job): those inside {...} matchers, in the lists
// of by/without/on/ignoring/group_left/group_right, and label_values()'s
// second argument.
std::set<std::string> metricNamesIn(const std::string& expr);

}  // namespace dtrain::testing
