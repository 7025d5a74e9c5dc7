#include "gpu/gpu_peak.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "common/settings.h"

namespace dtrain::gpu {
namespace {

DTRAIN_SETTING(double, kPeakTflops, "peak-tflops", "DTRAIN_PEAK_TFLOPS", 0.0,
               "Peak dense TFLOP/s of one GPU for MFU, over the built-in table (0: the table's figure for the "
               "GPU's name and the precision)");

struct PeakRow {
  const char* pattern;  // lower-case substring of the GPU's name
  double half_tflops;   // bf16 / fp16 dense
  double tf32_tflops;
};

// More specific names first: "h100 pcie" before "h100".
constexpr PeakRow kPeaks[] = {
    {"h100 pcie", 756.0, 378.0}, {"h100 nvl", 835.0, 417.5}, {"h100", 989.4, 494.7},
    {"h200", 989.4, 494.7},      {"gh200", 989.4, 494.7},    {"b200", 2250.0, 1125.0},
    {"a100", 312.0, 156.0},      {"l40s", 362.05, 183.0},
};

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

}  // namespace

double peakDenseFlops(const std::string& gpu_name, const std::string& precision) {
  const double override_tflops = kPeakTflops.get();
  if (override_tflops > 0 && std::isfinite(override_tflops)) return override_tflops * 1e12;
  const std::string name = lower(gpu_name);
  for (const PeakRow& row : kPeaks) {
    if (name.find(row.pattern) != std::string::npos) {
      return (precision == "fp32" ? row.tf32_tflops : row.half_tflops) * 1e12;
    }
  }
  return 0;
}

}  // namespace dtrain::gpu
