// Host-side table of RoPE inverse frequencies (rope.h).
#include <cmath>
#include <numbers>

#include "models/kernels/rope.h"

namespace dtrain::kernels {

std::vector<float> rope_inverse_frequencies(int head_dim, double theta, const RopeScaling* scaling) {
  std::vector<float> out;
  if (head_dim <= 0 || head_dim % 2 != 0) return out;
  out.reserve(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) {
    double freq = 1.0 / std::pow(theta, (2.0 * i) / head_dim);
    if (scaling) {
      const double low_freq_wavelen = scaling->original_max_position / scaling->low_freq_factor;
      const double high_freq_wavelen = scaling->original_max_position / scaling->high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / freq;
      if (wavelen > low_freq_wavelen) {
        freq /= scaling->factor;
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth = (scaling->original_max_position / wavelen - scaling->low_freq_factor) /
                              (scaling->high_freq_factor - scaling->low_freq_factor);
        freq = (1.0 - smooth) * freq / scaling->factor + smooth * freq;
      }
    }
    out.push_back(static_cast<float>(freq));
  }
  return out;
}

}  // namespace dtrain::kernels
