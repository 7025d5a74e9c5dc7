// CPU references of the fused kernels: plain loops, double accumulation.
// Inputs are the exact values the GPU reads (already rounded to the dtype).
#pragma once

#include <cstdint>
#include <vector>

#include "models/kernels/kernel_types.h"

namespace dtrain::kernels::reference {

struct NormForward {
  std::vector<float> h;  // x + residual, rounded to the activation dtype
  std::vector<double> y, mean, rstd;
};

// residual may be empty. rms: RMSNorm (bias ignored).
NormForward norm_forward(bool rms, const std::vector<float>& x, const std::vector<float>& residual,
                         const std::vector<float>& weight, const std::vector<float>& bias, int64_t rows, int cols,
                         double eps, DType act);

struct NormBackward {
  std::vector<double> dx, dweight, dbias;
  std::vector<double> dweight_abs, dbias_abs;  // sums of |terms|: the scale of the sums' rounding
};

// h: what forward normalised; dresidual may be empty. Statistics recomputed in double.
NormBackward norm_backward(bool rms, const std::vector<float>& dy, const std::vector<float>& h,
                           const std::vector<float>& weight, const std::vector<float>& dresidual, int64_t rows,
                           int cols, double eps);

// Batch norm (+ residual) (+ ReLU) over [rows, channels] (batch_norm.h).
// Training: the batch's statistics (biased variance), and the running ones
// updated from running_mean/running_var as torch does; eval: the running
// ones. y before rounding to the activation dtype.
struct BatchNormForward {
  std::vector<double> y, mean, invstd, running_mean, running_var;
};
BatchNormForward batch_norm_forward(const std::vector<float>& x, const std::vector<float>& residual,
                                    const std::vector<float>& weight, const std::vector<float>& bias,
                                    const std::vector<float>& running_mean, const std::vector<float>& running_var,
                                    int64_t rows, int channels, bool training, double momentum, double eps, bool relu);

struct BatchNormBackward {
  std::vector<double> dx, dresidual, dweight, dbias;
  std::vector<double> dweight_abs, dbias_abs;  // sums of |terms|: the scale of the sums' rounding
  std::vector<double> dx_scale;                // |weight invstd| (|g| + dbias_abs/M + |xhat| dweight_abs/M)
};
// y: the forward's output as the kernel wrote it (ReLU's mask is y > 0);
// mean, invstd: the statistics the forward saved (fp32), as backward reads them.
BatchNormBackward batch_norm_backward(const std::vector<float>& dy, const std::vector<float>& y,
                                      const std::vector<float>& x, const std::vector<float>& weight,
                                      const std::vector<float>& mean, const std::vector<float>& invstd, int64_t rows,
                                      int channels, bool training, bool relu);

double gelu(double h);
double gelu_grad(double h);

struct GeluBackward {
  std::vector<double> dx, dbias, dbias_abs;
};
std::vector<double> gelu_forward(const std::vector<float>& x, const std::vector<float>& bias, int64_t rows, int cols);
GeluBackward gelu_backward(const std::vector<float>& dy, const std::vector<float>& x, const std::vector<float>& bias,
                           int64_t rows, int cols);

// a, b, da, db: [rows, ffn] dense.
std::vector<double> swiglu_forward(const std::vector<float>& a, const std::vector<float>& b);
void swiglu_backward(const std::vector<float>& dy, const std::vector<float>& a, const std::vector<float>& b,
                     std::vector<double>* da, std::vector<double>* db);

// x: [tokens, heads, head_dim] dense; angle = fl32(pos * inv_freq[i]) as the
// kernels define it, cos/sin in double. direction -1: backward.
std::vector<double> rope(const std::vector<float>& x, int64_t tokens, int heads, int head_dim,
                         const std::vector<float>& inv_freq, const std::vector<int32_t>& positions, double direction);

struct CrossEntropy {
  std::vector<double> loss, lse;
  std::vector<double> dlogits;  // [rows, row_stride]
};
CrossEntropy cross_entropy(const std::vector<float>& logits, const std::vector<int64_t>& targets, int64_t rows,
                           int vocab, int64_t row_stride, int64_t ignore_index, double grad_scale);

}  // namespace dtrain::kernels::reference
