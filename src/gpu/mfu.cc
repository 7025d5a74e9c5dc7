#include "gpu/mfu.h"

#include <cmath>

namespace dtrain::gpu {

double modelFlopsUtilisation(double items_per_second, double flops_per_item, int gpus, double peak_flops_per_gpu) {
  // !(x > 0) also turns NaN away.
  if (!(peak_flops_per_gpu > 0) || gpus <= 0 || !(flops_per_item > 0)) return -1;
  if (!(items_per_second >= 0) || !std::isfinite(items_per_second)) return -1;
  const double mfu = items_per_second * flops_per_item / (peak_flops_per_gpu * static_cast<double>(gpus));
  return std::isfinite(mfu) ? mfu : -1;
}

}  // namespace dtrain::gpu
