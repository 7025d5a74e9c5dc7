// --fp8-recipe: how --precision fp8 scales the tensors it casts. Torch-free,
// so that the options (train/train_options.h) name it.
//   tensorwise  one scale per tensor from its absolute maximum; e4m3 for
//               weights and activations, e5m2 for gradients (torchao's
//               float8 "tensorwise", Transformer Engine's current scaling)
//   rowwise     one scale per row of each operand of each product (per
//               token, per output channel; axiswise in torchao's words),
//               rounded down to a power of two, e4m3 throughout (torchao's
//               "rowwise"): an outlier spoils its row only. Compute
//               capability 9.0 or newer (cuBLASLt's row-scaled products).
#pragma once

namespace dtrain::models {

enum class Fp8Recipe { kTensorwise, kRowwise };

}  // namespace dtrain::models
