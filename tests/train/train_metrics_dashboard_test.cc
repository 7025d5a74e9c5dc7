// The Grafana dashboard's training panels evaluated by Prometheus' own PromQL
// engine (`promtool test rules`, Debian's prometheus package) over what two
// ranks of one job serve: the panel shows the job's real rate, not the
// ranks' count times it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/command.h"
#include "tests/support/temp_dir.h"
#include "train/train_metrics.h"

namespace dtrain {
namespace {

using nlohmann::json;

struct Sample {
  std::string series;  // name{labels}, as exposed
  std::string value;
};

// The samples of Prometheus text (comments and blank lines skipped).
std::vector<Sample> samplesOf(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    out.push_back({line.substr(0, space), line.substr(space + 1)});
  }
  return out;
}

// Panels at the top and inside collapsed rows.
const json* findPanel(const json& panels, const std::string& title) {
  for (const auto& panel : panels) {
    if (panel.value("title", "") == title) return &panel;
    if (panel.contains("panels")) {
      if (const json* inner = findPanel(panel["panels"], title)) return inner;
    }
  }
  return nullptr;
}

json panelTitled(const std::string& title) {
  std::ifstream in(testing::sourceDir() + "/deploy/grafana/dtrain-dashboard.json");
  const json dashboard = json::parse(in);
  if (const json* panel = findPanel(dashboard.at("panels"), title)) return *panel;
  ADD_FAILURE() << "the dashboard has no panel \"" << title << "\"";
  return json::object();
}

// The panel's query with Grafana's variables as a dashboard showing every
// job and rank would expand them.
std::string expanded(std::string promql) {
  for (const auto& [variable, value] : std::vector<std::pair<std::string, std::string>>{
           {"$dtrain_job", ".*"}, {"$rank", ".*"}, {"$__rate_interval", "1m"}}) {
    for (auto at = promql.find(variable); at != std::string::npos; at = promql.find(variable, at + value.size())) {
      promql.replace(at, variable.size(), value);
    }
  }
  return promql;
}

std::string yamlQuoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// `promtool test rules`: the series held at their values for 2 minutes, and
// `promql` at 1 minute expected to give exactly `expected` (labels -> value).
// "" when it does, promtool's account of the difference otherwise.
std::string evaluate(const std::vector<Sample>& samples, const std::string& promql,
                     const std::vector<std::pair<std::string, double>>& expected, const std::string& dir) {
  std::ofstream test(dir + "/panel_test.yml");
  test << "evaluation_interval: 1m\ntests:\n  - interval: 15s\n    input_series:\n";
  for (const auto& s : samples) {
    test << "      - series: " << yamlQuoted(s.series) << "\n        values: '" << s.value << "x8'\n";
  }
  test << "    promql_expr_test:\n      - expr: " << yamlQuoted(promql) << "\n        eval_time: 1m\n"
       << "        exp_samples:\n";
  for (const auto& [labels, value] : expected) {
    test << "          - labels: " << yamlQuoted(labels) << "\n            value: " << value << "\n";
  }
  test.close();
  auto r = testing::runCommand("promtool test rules " + dir + "/panel_test.yml", 60);
  return r.exit_code == 0 ? "" : r.output;
}

TEST(TrainMetricsDashboardTest, SamplesPerSecondPanelShowsTheJobsRealRate) {
  if (testing::runCommand("command -v promtool").exit_code != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus, scripts/setup.sh)";
  }
  testing::TempDir dir("dtrain-dashboard-eval");
  ::setenv("DTRAIN_JOBS_DIR", (dir / "jobs").c_str(), 1);
  // Two ranks of one job, 32 samples a step each; at the log interval the
  // training loop hands every rank the job's rate: 1000 samples/s in all.
  constexpr double kJobRate = 1000;
  std::vector<Sample> samples;
  for (int rank : {0, 1}) {
    TrainMetrics metrics(rank, 2, "two-ranks", torch::kCPU);
    for (int step = 0; step < 4; ++step) metrics.stepStarted(32);
    metrics.logInterval(kJobRate, 0.5, nullptr, 0, 4);
    for (auto& s : samplesOf(metrics.render())) {
      if (s.series.starts_with("dtrain_train_samples_per_second")) samples.push_back(std::move(s));
    }
  }
  ::unsetenv("DTRAIN_JOBS_DIR");
  ASSERT_EQ(samples.size(), 2u) << "one dtrain_train_samples_per_second series per rank";

  const json panel = panelTitled("Samples per second");
  bool job_total_seen = false, per_rank_seen = false;
  for (const auto& target : panel.value("targets", json::array())) {
    const std::string promql = expanded(target.at("expr").get<std::string>());
    const bool per_rank = target.value("legendFormat", "").find("{{rank}}") != std::string::npos;
    std::string mismatch;
    if (per_rank) {
      per_rank_seen = true;
      mismatch = evaluate(samples, promql,
                          {{samples[0].series, kJobRate / 2}, {samples[1].series, kJobRate / 2}},
                          dir.path());
    } else {
      job_total_seen = true;
      mismatch = evaluate(samples, promql, {{"{dtrain_job=\"two-ranks\"}", kJobRate}}, dir.path());
    }
    EXPECT_EQ(mismatch, "") << (per_rank ? "each rank's share" : "the job's rate") << " from " << promql;
  }
  EXPECT_TRUE(job_total_seen) << "no query of the job's rate in " << panel.dump();
  EXPECT_TRUE(per_rank_seen) << "no per-rank query in " << panel.dump();
}

}  // namespace
}  // namespace dtrain
