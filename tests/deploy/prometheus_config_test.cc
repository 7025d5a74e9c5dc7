// deploy/prometheus/prometheus.yml: valid YAML that scrapes `dtrain exporter`
// on :9400 and the training jobs, each from a static list and from files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/command.h"

namespace dtrain::testing {
namespace {

using nlohmann::json;

std::string configPath() { return sourceDir() + "/deploy/prometheus/prometheus.yml"; }

// Debian's python3-yaml turns the YAML into JSON, which the test can walk.
json loadConfig() {
  auto r = runCommand("/usr/bin/python3 -c \"import json, sys, yaml; "
                      "print(json.dumps(yaml.safe_load(open(sys.argv[1]))))\" " + configPath(),
                      60);
  if (r.exit_code != 0) {
    ADD_FAILURE() << "prometheus.yml does not parse as YAML, or /usr/bin/python3 lacks yaml "
                     "(run scripts/setup.sh: Debian package python3-yaml):\n" << r.output;
    return json::object();
  }
  return json::parse(r.output);
}

json scrapeJob(const json& config, const std::string& name) {
  for (const auto& job : config.value("scrape_configs", json::array())) {
    if (job.value("job_name", "") == name) return job;
  }
  ADD_FAILURE() << "no scrape job " << name;
  return json::object();
}

TEST(PrometheusConfigTest, ScrapesTheExporterOnEveryNode) {
  json job = scrapeJob(loadConfig(), "dtrain-exporter");
  ASSERT_FALSE(job.empty());
  ASSERT_FALSE(job.value("static_configs", json::array()).empty());
  for (const auto& group : job["static_configs"]) {
    ASSERT_FALSE(group.at("targets").empty());
    for (const auto& target : group["targets"]) {
      EXPECT_TRUE(target.get<std::string>().ends_with(":9400")) << target;
    }
  }
  ASSERT_FALSE(job.value("file_sd_configs", json::array()).empty());
  EXPECT_FALSE(job["file_sd_configs"][0].at("files").empty());
  EXPECT_EQ(job.value("metrics_path", "/metrics"), "/metrics");
}

TEST(PrometheusConfigTest, ScrapesTrainingJobsUnderTheirOwnLabels) {
  json job = scrapeJob(loadConfig(), "dtrain-train");
  ASSERT_FALSE(job.empty());
  // The ranks label their series dtrain_job, apart from the target labels
  // Prometheus adds (job, instance): honor_labels would let a target
  // overwrite those, and nothing needs it.
  EXPECT_EQ(job.value("honor_labels", false), false);
  EXPECT_FALSE(job.value("static_configs", json::array()).empty());
  EXPECT_FALSE(job.value("file_sd_configs", json::array()).empty());
}

TEST(PrometheusConfigTest, PromtoolAcceptsIt) {
  if (runCommand("command -v promtool").exit_code != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus); the YAML tests above still ran";
  }
  auto r = runCommand("promtool check config " + configPath(), 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace dtrain::testing
