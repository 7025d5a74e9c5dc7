#include "metrics/prometheus_text.h"

#include <charconv>
#include <cmath>
#include <set>

#include "common/error.h"

namespace dtrain::metrics {
namespace {

bool isNameStart(char c, bool colon_ok) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':');
}

bool isValidName(std::string_view name, bool colon_ok) {
  if (name.empty() || !isNameStart(name[0], colon_ok)) return false;
  for (char c : name.substr(1)) {
    if (!isNameStart(c, colon_ok) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

}  // namespace

const char* metricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kGauge: return "gauge";
    case MetricType::kCounter: return "counter";
    case MetricType::kUntyped: return "untyped";
  }
  return "untyped";
}

MetricFamily::MetricFamily(std::string name, std::string help, MetricType type)
    : name_(std::move(name)), help_(std::move(help)), type_(type) {
  if (!isValidName(name_, /*colon_ok=*/true)) {
    throw ConfigError("invalid Prometheus metric name '" + name_ + "'; expected [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
}

MetricFamily& MetricFamily::add(Labels labels, double value) {
  std::set<std::string_view> seen;
  for (const auto& [label, unused] : labels) {
    if (!isValidName(label, /*colon_ok=*/false) || label.starts_with("__")) {
      throw ConfigError("invalid Prometheus label name '" + label + "' on " + name_ +
                        "; expected [a-zA-Z_][a-zA-Z0-9_]* not starting with __");
    }
    if (!seen.insert(label).second) throw ConfigError("label '" + label + "' given twice on " + name_);
  }
  samples_.push_back(MetricSample{std::move(labels), value});
  return *this;
}

std::string escapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string escapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string formatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, end);
}

std::string render(const std::vector<MetricFamily>& families) {
  std::set<std::string_view> names;
  std::string out;
  for (const MetricFamily& family : families) {
    if (!names.insert(family.name()).second) {
      throw ConfigError("metric family " + family.name() + " given twice; one family per name");
    }
    if (family.samples().empty()) continue;
    out += "# HELP " + family.name() + " " + escapeHelp(family.help()) + "\n";
    out += "# TYPE " + family.name() + " " + metricTypeName(family.type()) + "\n";
    for (const MetricSample& sample : family.samples()) {
      out += family.name();
      if (!sample.labels.empty()) {
        out += '{';
        for (size_t i = 0; i < sample.labels.size(); ++i) {
          if (i > 0) out += ',';
          out += sample.labels[i].first + "=\"" + escapeLabelValue(sample.labels[i].second) + "\"";
        }
        out += '}';
      }
      out += ' ' + formatValue(sample.value) + '\n';
    }
  }
  return out;
}

}  // namespace dtrain::metrics
