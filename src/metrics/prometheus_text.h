// Prometheus text exposition format 0.0.4: the body of GET /metrics.
//
//   MetricFamily power("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", MetricType::kGauge);
//   power.add({{"gpu", "0"}, {"UUID", uuid}}, 312.5);
//   std::string body = render({power, ...});
//
// One family per metric name, each with its # HELP and # TYPE lines, then its
// samples. Names and label names are checked when given (ConfigError);
// label values and help texts are escaped when rendered. The exporter's GPU
// metrics use it, and so can the training metrics.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtrain::metrics {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType { kGauge, kCounter, kUntyped };
const char* metricTypeName(MetricType type);

using Labels = std::vector<std::pair<std::string, std::string>>;

struct MetricSample {
  Labels labels;
  double value = 0;
};

class MetricFamily {
 public:
  // Throws ConfigError unless name matches [a-zA-Z_:][a-zA-Z0-9_:]*.
  MetricFamily(std::string name, std::string help, MetricType type);

  // Throws ConfigError for a label name that is not [a-zA-Z_][a-zA-Z0-9_]*,
  // starts with "__", or repeats within the sample.
  MetricFamily& add(Labels labels, double value);

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricType type() const { return type_; }
  const std::vector<MetricSample>& samples() const { return samples_; }

 private:
  std::string name_;
  std::string help_;
  MetricType type_;
  std::vector<MetricSample> samples_;
};

// The exposition of all families, in order. A family without samples is left
// out. Throws ConfigError when two families share a name.
std::string render(const std::vector<MetricFamily>& families);

// Pieces of the format, exposed for tests.
std::string escapeLabelValue(std::string_view value);  // \ " and newline
std::string escapeHelp(std::string_view help);          // \ and newline
std::string formatValue(double value);                  // shortest round-trip; NaN, +Inf, -Inf

}  // namespace dtrain::metrics
