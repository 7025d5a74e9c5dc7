#include "kernel_reference.h"

#include <cmath>
#include <limits>

#include "kernel_test_util.h"

namespace dtrain::kernels::reference {

NormForward norm_forward(bool rms, const std::vector<float>& x, const std::vector<float>& residual,
                         const std::vector<float>& weight, const std::vector<float>& bias, int64_t rows, int cols,
                         double eps, DType act) {
  NormForward out;
  out.h.resize(x.size());
  out.y.resize(x.size());
  out.mean.resize(rows);
  out.rstd.resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const size_t o = r * cols;
    double sum = 0;
    for (int c = 0; c < cols; ++c) {
      const double v = residual.empty() ? x[o + c] : double(x[o + c]) + double(residual[o + c]);
      out.h[o + c] = testing::round_to(act, static_cast<float>(v));
      sum += out.h[o + c];
    }
    const double mean = rms ? 0.0 : sum / cols;
    double sq = 0;
    for (int c = 0; c < cols; ++c) sq += (out.h[o + c] - mean) * (out.h[o + c] - mean);
    const double rstd = 1.0 / std::sqrt(sq / cols + eps);
    out.mean[r] = mean;
    out.rstd[r] = rstd;
    for (int c = 0; c < cols; ++c) {
      out.y[o + c] = (out.h[o + c] - mean) * rstd * weight[c] + (rms || bias.empty() ? 0.0 : bias[c]);
    }
  }
  return out;
}

NormBackward norm_backward(bool rms, const std::vector<float>& dy, const std::vector<float>& h,
                           const std::vector<float>& weight, const std::vector<float>& dresidual, int64_t rows,
                           int cols, double eps) {
  NormBackward out;
  out.dx.resize(h.size());
  out.dweight.assign(cols, 0.0);
  out.dbias.assign(cols, 0.0);
  out.dweight_abs.assign(cols, 0.0);
  out.dbias_abs.assign(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const size_t o = r * cols;
    double sum = 0;
    for (int c = 0; c < cols; ++c) sum += h[o + c];
    const double mean = rms ? 0.0 : sum / cols;
    double sq = 0;
    for (int c = 0; c < cols; ++c) sq += (h[o + c] - mean) * (h[o + c] - mean);
    const double rstd = 1.0 / std::sqrt(sq / cols + eps);
    double sg = 0, sgh = 0;
    for (int c = 0; c < cols; ++c) {
      const double g = double(dy[o + c]) * weight[c];
      sg += g;
      sgh += g * (h[o + c] - mean) * rstd;
    }
    const double mg = rms ? 0.0 : sg / cols, mgh = sgh / cols;
    for (int c = 0; c < cols; ++c) {
      const double hhat = (h[o + c] - mean) * rstd;
      const double g = double(dy[o + c]) * weight[c];
      out.dx[o + c] = (g - mg - hhat * mgh) * rstd + (dresidual.empty() ? 0.0 : dresidual[o + c]);
      out.dweight[c] += dy[o + c] * hhat;
      out.dbias[c] += dy[o + c];
      out.dweight_abs[c] += std::fabs(dy[o + c] * hhat);
      out.dbias_abs[c] += std::fabs(dy[o + c]);
    }
  }
  return out;
}

BatchNormForward batch_norm_forward(const std::vector<float>& x, const std::vector<float>& residual,
                                    const std::vector<float>& weight, const std::vector<float>& bias,
                                    const std::vector<float>& running_mean, const std::vector<float>& running_var,
                                    int64_t rows, int channels, bool training, double momentum, double eps,
                                    bool relu) {
  BatchNormForward out;
  out.mean.assign(channels, 0.0);
  out.invstd.assign(channels, 0.0);
  out.running_mean.assign(running_mean.begin(), running_mean.end());
  out.running_var.assign(running_var.begin(), running_var.end());
  for (int c = 0; c < channels; ++c) {
    if (!training) {
      out.mean[c] = running_mean[c];
      out.invstd[c] = 1.0 / std::sqrt(double(running_var[c]) + eps);
      continue;
    }
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r) sum += x[r * channels + c];
    const double mean = sum / rows;
    double sq = 0;
    for (int64_t r = 0; r < rows; ++r) sq += (x[r * channels + c] - mean) * (x[r * channels + c] - mean);
    out.mean[c] = mean;
    out.invstd[c] = 1.0 / std::sqrt(sq / rows + eps);
    out.running_mean[c] = (1 - momentum) * running_mean[c] + momentum * mean;
    out.running_var[c] = (1 - momentum) * running_var[c] + momentum * sq / (rows - 1);
  }
  out.y.resize(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < channels; ++c) {
      const size_t i = r * channels + c;
      double v = (x[i] - out.mean[c]) * out.invstd[c] * weight[c] + bias[c] + (residual.empty() ? 0.0 : residual[i]);
      if (relu && v < 0) v = 0;
      out.y[i] = v;
    }
  }
  return out;
}

BatchNormBackward batch_norm_backward(const std::vector<float>& dy, const std::vector<float>& y,
                                      const std::vector<float>& x, const std::vector<float>& weight,
                                      const std::vector<float>& mean, const std::vector<float>& invstd, int64_t rows,
                                      int channels, bool training, bool relu) {
  BatchNormBackward out;
  out.dweight.assign(channels, 0.0);
  out.dbias.assign(channels, 0.0);
  out.dweight_abs.assign(channels, 0.0);
  out.dbias_abs.assign(channels, 0.0);
  out.dresidual.resize(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < channels; ++c) {
      const size_t i = r * channels + c;
      const double g = relu && !(y[i] > 0) ? 0.0 : double(dy[i]);
      const double xhat = (double(x[i]) - mean[c]) * invstd[c];
      out.dresidual[i] = g;
      out.dbias[c] += g;
      out.dweight[c] += g * xhat;
      out.dbias_abs[c] += std::fabs(g);
      out.dweight_abs[c] += std::fabs(g * xhat);
    }
  }
  out.dx.resize(x.size());
  out.dx_scale.resize(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < channels; ++c) {
      const size_t i = r * channels + c;
      const double g = out.dresidual[i];
      const double xhat = (double(x[i]) - mean[c]) * invstd[c];
      const double a = double(weight[c]) * invstd[c];
      const double kb = training ? out.dbias[c] / rows : 0.0, kw = training ? out.dweight[c] / rows : 0.0;
      out.dx[i] = a * (g - kb - xhat * kw);
      out.dx_scale[i] = std::fabs(a) * (std::fabs(g) + (training ? out.dbias_abs[c] / rows +
                                                                      std::fabs(xhat) * out.dweight_abs[c] / rows
                                                                : 0.0));
    }
  }
  return out;
}

namespace {
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCoeff = 0.044715;
}  // namespace

double gelu(double h) { return 0.5 * h * (1.0 + std::tanh(kSqrt2OverPi * (h + kGeluCoeff * h * h * h))); }

double gelu_grad(double h) {
  const double t = std::tanh(kSqrt2OverPi * (h + kGeluCoeff * h * h * h));
  return 0.5 * (1.0 + t) + 0.5 * h * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluCoeff * h * h);
}

std::vector<double> gelu_forward(const std::vector<float>& x, const std::vector<float>& bias, int64_t rows, int cols) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) y[r * cols + c] = gelu(double(x[r * cols + c]) + (bias.empty() ? 0.0 : bias[c]));
  }
  return y;
}

GeluBackward gelu_backward(const std::vector<float>& dy, const std::vector<float>& x, const std::vector<float>& bias,
                           int64_t rows, int cols) {
  GeluBackward out;
  out.dx.resize(x.size());
  out.dbias.assign(cols, 0.0);
  out.dbias_abs.assign(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const size_t i = r * cols + c;
      const double g = dy[i] * gelu_grad(double(x[i]) + (bias.empty() ? 0.0 : bias[c]));
      out.dx[i] = g;
      out.dbias[c] += g;
      out.dbias_abs[c] += std::fabs(g);
    }
  }
  return out;
}

namespace {
double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
}  // namespace

std::vector<double> swiglu_forward(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] * sigmoid(a[i]) * b[i];
  return y;
}

void swiglu_backward(const std::vector<float>& dy, const std::vector<float>& a, const std::vector<float>& b,
                     std::vector<double>* da, std::vector<double>* db) {
  da->resize(a.size());
  db->resize(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double s = sigmoid(a[i]);
    (*da)[i] = double(dy[i]) * b[i] * s * (1.0 + a[i] * (1.0 - s));
    (*db)[i] = double(dy[i]) * a[i] * s;
  }
}

std::vector<double> rope(const std::vector<float>& x, int64_t tokens, int heads, int head_dim,
                         const std::vector<float>& inv_freq, const std::vector<int32_t>& positions, double direction) {
  std::vector<double> out(x.size());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int i = 0; i < head_dim / 2; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];  // fp32, as defined
      const double c = std::cos(double(angle)), s = direction * std::sin(double(angle));
      for (int h = 0; h < heads; ++h) {
        const size_t o = (t * heads + h) * head_dim + 2 * i;
        out[o] = x[o] * c - x[o + 1] * s;
        out[o + 1] = x[o] * s + x[o + 1] * c;
      }
    }
  }
  return out;
}

CrossEntropy cross_entropy(const std::vector<float>& logits, const std::vector<int64_t>& targets, int64_t rows,
                           int vocab, int64_t row_stride, int64_t ignore_index, double grad_scale) {
  CrossEntropy out;
  out.loss.resize(rows);
  out.lse.resize(rows);
  out.dlogits.assign(rows * row_stride, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits.data() + r * row_stride;
    double m = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < vocab; ++j) m = std::max(m, double(x[j]));
    double s = 0;
    for (int j = 0; j < vocab; ++j) s += std::exp(x[j] - m);
    const double lse = m + std::log(s);
    out.lse[r] = lse;
    const int64_t t = targets[r];
    if (t == ignore_index) {
      out.loss[r] = 0;
      continue;
    }
    out.loss[r] = lse - x[t];
    for (int j = 0; j < vocab; ++j) {
      out.dlogits[r * row_stride + j] = (std::exp(x[j] - lse) - (j == t ? 1.0 : 0.0)) * grad_scale;
    }
  }
  return out;
}

}  // namespace dtrain::kernels::reference
