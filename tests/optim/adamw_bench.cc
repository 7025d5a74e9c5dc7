// adamw_bench: AdamW's capturable step and clipGradNormOnDevice over one
// CUDA fp32 slab, the fused kernels (models/kernels/optimizer.h) against the
// torch operations (DTRAIN_FUSED_KERNELS=0), at GPT-2 124M's and Llama 3.2
// 1B's parameter counts. GB/s counts the fewest bytes each must move: AdamW
// reads param, grad, exp_avg, exp_avg_sq and writes three of them (28 bytes
// per element); clipping reads the grad for the norm, then reads and writes
// it to scale (12 bytes per element). Median of 5 runs of 10 steps.
//   adamw_bench [--elements N]   (exits 0 with a message when there is no GPU)
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/settings.h"
#include "dtrain/optim.h"

namespace {

void setFused(bool on) {
  setenv("DTRAIN_FUSED_KERNELS", on ? "1" : "0", 1);
  for (const dtrain::SettingBase* s : dtrain::allSettings()) {
    if (s->env() == "DTRAIN_FUSED_KERNELS") s->reset();
  }
}

// Milliseconds per call: 3 warm-up calls, then the median of 5 runs of 10.
double timeMs(const std::function<void()>& call) {
  for (int i = 0; i < 3; ++i) call();
  torch::cuda::synchronize();
  std::vector<double> runs;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) call();
    torch::cuda::synchronize();
    runs.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / 10);
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

void row(const char* what, int64_t n, const char* path, double ms, double bytes_per_element) {
  std::printf("| %-22s | %13lld | %-10s | %9.3f | %8.0f |\n", what, static_cast<long long>(n), path, ms,
              bytes_per_element * static_cast<double>(n) / (ms * 1e-3) / 1e9);
}

void benchSlab(int64_t n) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA);
  dtrain::FlatSlab slab{torch::randn({n}, f32), torch::randn({n}, f32), true};
  for (bool fused : {true, false}) {
    setFused(fused);
    const char* path = fused ? "fused" : "torch ops";
    {
      auto opt = dtrain::makeAdamW({slab}, {.lr = 1e-4, .weight_decay = 0.1});
      opt->setCapturable(true);
      row("adamw step", n, path, timeMs([&] { opt->step(); }), 28);
    }
    torch::cuda::synchronize();
    // max_norm large: the coefficient is 1, the grads keep their values.
    row("clip grad norm", n, path, timeMs([&] { dtrain::clipGradNormOnDevice({slab}, 1e30); }), 12);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {124'439'808, 1'235'814'400};  // GPT-2 124M, Llama 3.2 1B
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--elements")) sizes = {std::atoll(argv[i + 1])};
  }
  if (!torch::cuda::is_available()) {
    std::printf("adamw_bench: no CUDA GPU, nothing to measure\n");
    return 0;
  }
  torch::NoGradGuard no_grad;
#if !DTRAIN_FUSED_ADAMW
  std::printf("(this build has no fused AdamW: both paths run the torch operations)\n");
#endif
  std::printf("AdamW (capturable: lr and step on the device) over one fp32 slab; ms per call, median of 5 x 10\n\n");
  std::printf("| operation              |      elements | path       |        ms |     GB/s |\n");
  std::printf("|------------------------|--------------:|------------|----------:|---------:|\n");
  for (int64_t n : sizes) benchSlab(n);
  return 0;
}
