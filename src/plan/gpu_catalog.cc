#include "plan/gpu_catalog.h"

#include <algorithm>
#include <cctype>

#include "common/error.h"

namespace dtrain::plan {

const std::vector<GpuSpec>& gpuCatalog() {
  static const std::vector<GpuSpec> gpus = {
      {"h100", "NVIDIA H100 SXM 80 GB (HBM3, NVLink 4)", 79.6, 989.4, 1978.9, 3.35, 353, 8, 90},
      {"h200", "NVIDIA H200 SXM 141 GB (HBM3e, NVLink 4)", 140.4, 989.4, 1978.9, 4.8, 353, 8, 90},
      {"b200", "NVIDIA B200 180 GB (HBM3e, NVLink 5)", 179.1, 2250, 4500, 8.0, 706, 8, 100},
      {"a100-80g", "NVIDIA A100 SXM 80 GB (HBM2e, NVLink 3)", 80.0, 312, 0, 2.04, 235, 8, 80},
      {"a100-40g", "NVIDIA A100 SXM 40 GB (HBM2, NVLink 3)", 40.0, 312, 0, 1.56, 235, 8, 80},
      {"l40s", "NVIDIA L40S 48 GB (GDDR6, PCIe 4)", 45.0, 362, 733, 0.864, 20, 8, 89},
  };
  return gpus;
}

const GpuSpec& gpuByName(const std::string& given) {
  std::string name;
  for (char c : given) name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name.size() > 4 && name.ends_with("-sxm")) name.resize(name.size() - 4);
  if (name == "a100") name = "a100-80g";
  for (const GpuSpec& g : gpuCatalog()) {
    if (g.name == name) return g;
  }
  std::string names;
  for (const GpuSpec& g : gpuCatalog()) names += (names.empty() ? "" : ", ") + g.name;
  throw ConfigError("--gpu '" + given + "' is not in dtrain's table of GPUs; expected one of " + names);
}

}  // namespace dtrain::plan
