// `dtrain plan --calibrate`'s fitted constants (torch-free): what short
// benchmarks on this cluster's GPUs measured, kept in a file that the next
// `dtrain plan` for the same GPU reads instead of the defaults.
//
//   efficiency      of `dtrain bench train`'s one-GPU run: its model FLOPs
//                   per second (tokens/s x step_model's FLOPs per token) over
//                   the catalog's bf16 peak -- on one GPU the step model's
//                   time is its compute alone, so this is the constant that
//                   makes the prediction equal the measurement
//   intra_node_gbs  `dtrain bench allreduce`'s bus bandwidth at 1 GiB over
//                   the node's GPUs (0 when there was one GPU: none measured)
//
// The file is JSON:
//   {"gpu": "h200", "gpu_name": "NVIDIA H200", "gpus": 1, "efficiency": 0.50,
//    "intra_node_gbs": 0, "host": "...", "date": "2026-12-02T10:00:00Z",
//    "model": "llama-1b", "seq_len": 2048, "batch_size": 4, "tokens_per_s": 60426}
// written whole or not at all (a temporary file renamed over it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace dtrain::plan {

struct Calibration {
  std::string gpu;       // the catalog's name (gpu_catalog.h): "h200"
  std::string gpu_name;  // as NVIDIA names it: "NVIDIA H200"
  int gpus = 1;
  double efficiency = 0;
  double intra_node_gbs = 0;
  std::string host;
  std::string date;
  std::string model;
  int64_t seq_len = 0;
  int64_t batch_size = 0;
  double tokens_per_s = 0;
};

// The catalog entry NVIDIA's device name stands for ("NVIDIA H100 80GB
// HBM3" -> "h100", "NVIDIA A100-SXM4-40GB" -> "a100-40g"); "" when none.
std::string catalogNameOf(const std::string& nvidia_name);

// $XDG_CONFIG_HOME/dtrain/plan-calibration.json, else
// ~/.config/dtrain/plan-calibration.json.
std::string defaultCalibrationPath();

nlohmann::json calibrationJson(const Calibration& c);
// ConfigError naming `path` and the field when the JSON is not a calibration.
Calibration calibrationFromJson(const nlohmann::json& j, const std::string& path);

// nullopt when the file does not exist; ConfigError naming it when it is
// not a calibration.
std::optional<Calibration> readCalibration(const std::string& path);
void writeCalibration(const std::string& path, const Calibration& c);

}  // namespace dtrain::plan
