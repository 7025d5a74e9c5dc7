#include "plan/calibration.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/env.h"
#include "common/error.h"

namespace dtrain::plan {

std::string catalogNameOf(const std::string& nvidia_name) {
  std::string n;
  for (char c : nvidia_name) n += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const auto has = [&n](const char* part) { return n.find(part) != std::string::npos; };
  if (has("H200")) return "h200";
  if (has("H100") || has("GH200")) return "h100";
  if (has("B200")) return "b200";
  if (has("A100")) return has("40GB") ? "a100-40g" : "a100-80g";
  if (has("L40S")) return "l40s";
  return "";
}

std::string defaultCalibrationPath() {
  const std::optional<std::string> xdg = envString("XDG_CONFIG_HOME");
  if (xdg && !xdg->empty()) return *xdg + "/dtrain/plan-calibration.json";
  const std::optional<std::string> home = envString("HOME");
  return (home && !home->empty() ? *home : std::string(".")) + "/.config/dtrain/plan-calibration.json";
}

nlohmann::json calibrationJson(const Calibration& c) {
  return {{"gpu", c.gpu},     {"gpu_name", c.gpu_name},   {"gpus", c.gpus},
          {"efficiency", c.efficiency}, {"intra_node_gbs", c.intra_node_gbs}, {"host", c.host},
          {"date", c.date},   {"model", c.model},         {"seq_len", c.seq_len},
          {"batch_size", c.batch_size}, {"tokens_per_s", c.tokens_per_s}};
}

Calibration calibrationFromJson(const nlohmann::json& j, const std::string& path) {
  const auto fail = [&path](const std::string& field, const std::string& expected) -> ConfigError {
    return ConfigError("calibration " + path + ": \"" + field + "\" " + expected +
                       " (rewrite it with `dtrain plan --calibrate`)");
  };
  if (!j.is_object()) throw fail("(the file)", "is not a JSON object");
  const auto number = [&](const char* field, double min, double max) {
    const auto it = j.find(field);
    if (it == j.end() || !it->is_number() || !(it->get<double>() >= min) || !(it->get<double>() <= max)) {
      std::ostringstream expected;
      expected << "must be a number from " << min << " to " << max;
      throw fail(field, expected.str());
    }
    return it->get<double>();
  };
  Calibration c;
  const auto gpu = j.find("gpu");
  if (gpu == j.end() || !gpu->is_string() || gpu->get<std::string>().empty()) throw fail("gpu", "must name a GPU");
  c.gpu = gpu->get<std::string>();
  c.efficiency = number("efficiency", 0.01, 1);
  c.intra_node_gbs = number("intra_node_gbs", 0, 1e6);
  c.gpus = static_cast<int>(number("gpus", 1, 1 << 16));
  c.gpu_name = j.value("gpu_name", std::string());
  c.host = j.value("host", std::string());
  c.date = j.value("date", std::string());
  c.model = j.value("model", std::string());
  c.seq_len = j.value("seq_len", int64_t{0});
  c.batch_size = j.value("batch_size", int64_t{0});
  c.tokens_per_s = j.value("tokens_per_s", 0.0);
  return c;
}

std::optional<Calibration> readCalibration(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return std::nullopt;
  std::ifstream in(path);
  if (!in) throw ConfigError("calibration " + path + ": cannot be read");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("calibration " + path + ": not JSON (" + std::string(e.what()) +
                      "); rewrite it with `dtrain plan --calibrate`");
  }
  return calibrationFromJson(j, path);
}

void writeCalibration(const std::string& path, const Calibration& c) {
  const std::filesystem::path target(path);
  std::error_code error;
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), error);
  const std::string staging = path + ".partial";
  {
    std::ofstream out(staging);
    out << calibrationJson(c).dump(2) << "\n";
    if (!out) throw IoError("calibration " + staging + ": cannot be written");
  }
  std::filesystem::rename(staging, path, error);
  if (error) throw IoError("calibration " + path + ": cannot be written (" + error.message() + ")");
}

}  // namespace dtrain::plan
