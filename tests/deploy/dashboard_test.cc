// deploy/grafana/dtrain-dashboard.json: a Grafana dashboard that loads, with
// its variables and a panel for every area it covers, whose every PromQL
// expression asks only for metrics dtrain serves.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/command.h"
#include "metric_names.h"

namespace dtrain::testing {
namespace {

using nlohmann::json;

json loadDashboard() {
  std::ifstream in(sourceDir() + "/deploy/grafana/dtrain-dashboard.json");
  EXPECT_TRUE(in) << "deploy/grafana/dtrain-dashboard.json is missing";
  return json::parse(in);
}

// Panels at the top and inside collapsed rows.
void collectPanels(const json& panels, std::vector<json>& out) {
  for (const auto& panel : panels) {
    out.push_back(panel);
    if (panel.contains("panels")) collectPanels(panel["panels"], out);
  }
}

std::vector<json> allPanels(const json& dashboard) {
  std::vector<json> out;
  collectPanels(dashboard.at("panels"), out);
  return out;
}

struct Expression {
  std::string where;  // panel title or variable name, for messages
  std::string promql;
};

// Panel targets and the queries of query variables (label_values(...)).
std::vector<Expression> promqlExpressions(const json& dashboard) {
  std::vector<Expression> out;
  for (const auto& panel : allPanels(dashboard)) {
    for (const auto& target : panel.value("targets", json::array())) {
      if (target.contains("expr")) out.push_back({panel.value("title", "?"), target["expr"].get<std::string>()});
    }
  }
  for (const auto& variable : dashboard.at("templating").at("list")) {
    if (variable.value("type", "") != "query") continue;
    const json& query = variable.at("query");
    out.push_back({"variable " + variable.value("name", "?"),
                   query.is_string() ? query.get<std::string>() : query.at("query").get<std::string>()});
  }
  return out;
}

std::string joined(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

TEST(MetricNamesTest, FindsMetricsButNotStringsFunctionsOrLabels) {
  auto names = metricNamesIn(
      R"(histogram_quantile(0.99, sum by (le, job) (rate(dtrain_train_step_seconds_bucket{job=~"dtrain_x", )"
      R"(gpu='dtrain_y'}[$__rate_interval]))) / DCGM_FI_DEV_FB_USED{Hostname=~"$Hostname"} * 1e6)");
  EXPECT_EQ(names, (std::set<std::string>{"dtrain_train_step_seconds_bucket", "DCGM_FI_DEV_FB_USED"}));
  EXPECT_EQ(metricNamesIn(R"(label_values(dtrain_train_samples_per_second, job))"),
            std::set<std::string>{"dtrain_train_samples_per_second"});
  EXPECT_TRUE(metricNamesIn(R"(up{job="dtrain-train", note="a \" dtrain_z"})").empty());
  // Label names are no metrics, even with dtrain's prefix.
  EXPECT_EQ(metricNamesIn(R"(sum by (dtrain_job, le) (rate(dtrain_a{dtrain_job=~"$dtrain_job"}[5m])) )"
                          R"(/ on (dtrain_job) group_left (dtrain_rank) dtrain_b)"),
            (std::set<std::string>{"dtrain_a", "dtrain_b"}));
  EXPECT_EQ(metricNamesIn(R"(label_values(dtrain_c{dtrain_job=~"$dtrain_job"}, dtrain_job))"),
            std::set<std::string>{"dtrain_c"});
}

TEST(DashboardTest, IsAGrafanaDashboardWithItsVariables) {
  json dashboard = loadDashboard();
  int schema = dashboard.at("schemaVersion").get<int>();
  EXPECT_GE(schema, 36);
  EXPECT_LE(schema, 41);
  EXPECT_FALSE(dashboard.at("uid").get<std::string>().empty());
  std::map<std::string, json> variables;
  for (const auto& v : dashboard.at("templating").at("list")) variables[v.at("name").get<std::string>()] = v;
  ASSERT_TRUE(variables.count("datasource"));
  EXPECT_EQ(variables["datasource"]["type"], "datasource");
  EXPECT_EQ(variables["datasource"]["query"], "prometheus");
  for (const char* name : {"Hostname", "gpu", "dtrain_job"}) {
    ASSERT_TRUE(variables.count(name)) << "no variable " << name;
    EXPECT_EQ(variables[name]["type"], "query") << name;
    EXPECT_EQ(variables[name]["datasource"]["uid"], "${datasource}") << name;
  }
  std::set<int> ids;
  for (const auto& panel : allPanels(dashboard)) {
    std::string title = panel.value("title", "?");
    EXPECT_TRUE(ids.insert(panel.at("id").get<int>()).second) << "duplicate panel id in " << title;
    const json& pos = panel.at("gridPos");
    EXPECT_LE(pos.at("x").get<int>() + pos.at("w").get<int>(), 24) << title;
    if (panel.at("type") == "row") continue;
    // Every query goes to the chosen data source, never one fixed at export.
    EXPECT_EQ(panel.at("datasource").at("uid"), "${datasource}") << title;
    ASSERT_FALSE(panel.value("targets", json::array()).empty()) << title << " has no query";
    for (const auto& target : panel["targets"]) EXPECT_EQ(target.at("datasource").at("uid"), "${datasource}") << title;
  }
}

TEST(DashboardTest, HasAPanelForEveryArea) {
  std::set<std::string> titles;
  for (const auto& panel : allPanels(loadDashboard())) titles.insert(panel.value("title", ""));
  for (const char* title : {"GPU utilisation", "GPU memory used / total", "Power", "Temperature", "Clocks",
                            "Clock throttle reasons", "ECC double-bit errors (volatile)", "Row remapping",
                            "XID errors", "NVLink throughput", "Samples per second", "Step time", "Loss",
                            "All-reduce time (share of wall time)", "All-reduce bytes per second",
                            "Compute/communication overlap", "Data-loader wait (share of wall time)",
                            "GPU memory (training)", "Restarts"}) {
    EXPECT_TRUE(titles.count(title)) << "no panel \"" << title << "\"";
  }
}

TEST(DashboardTest, StepTimeQuantilesComeFromTheHistogram) {
  std::set<std::string> quantiles;
  for (const auto& e : promqlExpressions(loadDashboard())) {
    if (e.promql.find("histogram_quantile(") == std::string::npos) continue;
    EXPECT_NE(e.promql.find("dtrain_train_step_seconds_bucket"), std::string::npos) << e.promql;
    EXPECT_NE(e.promql.find(" le"), std::string::npos) << "a quantile needs `le` kept: " << e.promql;
    quantiles.insert(e.promql.substr(0, e.promql.find(',')));
  }
  EXPECT_TRUE(quantiles.count("histogram_quantile(0.5")) << joined(quantiles);
  EXPECT_TRUE(quantiles.count("histogram_quantile(0.99")) << joined(quantiles);
}

// The ranks' series carry dtrain_job; `job` is Prometheus' scrape job
// ("dtrain-train" for every training run), so a query matching or grouping
// on it would lump all runs together or find nothing.
TEST(DashboardTest, TrainingQueriesSelectAndGroupByDtrainJob) {
  const std::regex job_label(R"((^|[^A-Za-z0-9_])job\s*(=~|!~|!=|=|,|\)))");
  int training = 0;
  for (const auto& e : promqlExpressions(loadDashboard())) {
    bool is_training = false;
    for (const auto& name : metricNamesIn(e.promql)) is_training |= trainingMetricNames().count(name) > 0;
    if (!is_training) continue;
    ++training;
    EXPECT_FALSE(std::regex_search(e.promql, job_label)) << e.where << " uses the `job` label: " << e.promql;
  }
  EXPECT_GT(training, 10);
  for (const auto& panel : allPanels(loadDashboard())) {
    for (const auto& target : panel.value("targets", json::array())) {
      const std::string legend = target.value("legendFormat", "");
      EXPECT_EQ(legend.find("{{job}}"), std::string::npos) << panel.value("title", "?") << ": " << legend;
    }
  }
}

TEST(DashboardTest, EveryExpressionUsesOnlyKnownMetricsAndEveryMetricIsCharted) {
  std::set<std::string> known = exporterMetricNames();
  known.insert(trainingMetricNames().begin(), trainingMetricNames().end());
  std::set<std::string> used;
  auto expressions = promqlExpressions(loadDashboard());
  ASSERT_GT(expressions.size(), 20u);
  for (const auto& e : expressions) {
    auto names = metricNamesIn(e.promql);
    EXPECT_FALSE(names.empty()) << e.where << ": no dtrain metric in " << e.promql;
    for (const auto& name : names) {
      EXPECT_TRUE(known.count(name)) << e.where << ": unknown metric " << name << " in " << e.promql;
      used.insert(name);
    }
  }
  for (const auto& name : known) EXPECT_TRUE(used.count(name)) << "no panel charts " << name;
}

TEST(DashboardTest, GpuMetricsAreOnesTheExporterLists) {
  // `dtrain exporter --list-metrics` is the exporter's own word on its names;
  // until the subcommand exists the list in metric_names.cc stands in for it.
  auto help = runCommand(dtrainBin() + " exporter --help", 30);
  if (help.exit_code != 0 || help.output.find("--list-metrics") == std::string::npos) {
    GTEST_SKIP() << "`dtrain exporter --list-metrics` does not exist yet; checked against metric_names.cc only";
  }
  auto listed = runCommand(dtrainBin() + " exporter --list-metrics", 30);
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  std::set<std::string> exporter_names = metricNamesIn(listed.output);
  ASSERT_FALSE(exporter_names.empty()) << "no metric names in:\n" << listed.output;
  for (const auto& e : promqlExpressions(loadDashboard())) {
    for (const auto& name : metricNamesIn(e.promql)) {
      if (trainingMetricNames().count(name)) continue;  // served by training jobs, not the exporter
      EXPECT_TRUE(exporter_names.count(name))
          << e.where << ": " << name << " is not in `dtrain exporter --list-metrics`:\n" << listed.output;
    }
  }
}

}  // namespace
}  // namespace dtrain::testing
