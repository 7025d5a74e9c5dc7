// A worker for collectives_test: each public tensor collective
// (include/dtrain/collectives.h) on the job's ranks, checked against the
// values every rank can compute; bad input checked for its message. Prints
// "collectives ok" on each rank that passed; exits 1 naming the first
// mismatch otherwise. Built with the public headers alone.
#include <cstdio>
#include <string>

#include <torch/torch.h>

#include "dtrain/collectives.h"
#include "dtrain/init.h"

namespace {

int failures = 0;

void expectClose(const torch::Tensor& got, const torch::Tensor& want, const std::string& what, int rank) {
  if (got.sizes() != want.sizes() || !torch::allclose(got.to(torch::kDouble).cpu(), want.to(torch::kDouble).cpu())) {
    std::fprintf(stderr, "rank %d: %s: got %s, want %s\n", rank, what.c_str(), torch::str(got).c_str(),
                 torch::str(want).c_str());
    ++failures;
  }
}

void expectError(const std::function<void()>& call, const std::string& text, const std::string& what, int rank) {
  try {
    call();
  } catch (const std::exception& e) {
    if (std::string(e.what()).find(text) != std::string::npos) return;
    std::fprintf(stderr, "rank %d: %s: error '%s' lacks '%s'\n", rank, what.c_str(), e.what(), text.c_str());
    ++failures;
    return;
  }
  std::fprintf(stderr, "rank %d: %s: no error\n", rank, what.c_str());
  ++failures;
}

}  // namespace

int main() {
  namespace dist = dtrain::dist;
  auto ctx = dtrain::init();
  const int r = ctx->rank(), n = ctx->size();
  const auto f = torch::TensorOptions().dtype(torch::kFloat).device(ctx->device());

  // allReduce: sum, average, max, min and product of rank + 1.
  const double sum = n * (n + 1) / 2.0;
  torch::Tensor t = torch::full({3, 2}, r + 1.0, f);
  dist::allReduce(*ctx, t);
  expectClose(t, torch::full({3, 2}, sum, f), "allReduce sum", r);
  t = torch::full({5}, r + 1.0, f);
  dist::allReduce(*ctx, t, {.op = dist::ReduceOp::kAvg});
  expectClose(t, torch::full({5}, sum / n, f), "allReduce avg", r);
  torch::Tensor m = torch::tensor({static_cast<int64_t>(r), static_cast<int64_t>(-r)}, torch::TensorOptions().dtype(torch::kLong).device(ctx->device()));
  dist::allReduce(*ctx, m, {.op = dist::ReduceOp::kMax});
  expectClose(m, torch::tensor({static_cast<int64_t>(n - 1), int64_t{0}}), "allReduce max int64", r);
  t = torch::full({2}, r + 1.0, f);
  dist::allReduce(*ctx, t, {.op = dist::ReduceOp::kMin});
  expectClose(t, torch::full({2}, 1.0, f), "allReduce min", r);
  t = torch::full({2}, r + 1.0, f);
  dist::allReduce(*ctx, t, {.op = dist::ReduceOp::kProduct});
  double product = 1;
  for (int i = 1; i <= n; ++i) product *= i;
  expectClose(t, torch::full({2}, product, f), "allReduce product", r);

  // broadcast from the last rank.
  t = torch::arange(4, f) + 10.0 * r;
  dist::broadcast(*ctx, t, {.root = n - 1});
  expectClose(t, torch::arange(4, f) + 10.0 * (n - 1), "broadcast from the last rank", r);

  // allGather: rank-ordered concatenation along dimension 0.
  torch::Tensor mine = torch::full({2, 3}, static_cast<double>(r), f);
  torch::Tensor all = dist::allGather(*ctx, mine);
  expectClose(all, torch::arange(n, f).repeat_interleave(2).unsqueeze(1).expand({2 * n, 3}), "allGather", r);
  torch::Tensor scalars = dist::allGather(*ctx, torch::tensor(static_cast<double>(r), f));
  expectClose(scalars, torch::arange(n, f), "allGather of 0-d tensors", r);

  // reduceScatter: rank i gets the i-th slice of the sum.
  torch::Tensor input = torch::arange(2 * n, f).reshape({2 * n, 1}) * (r + 1);
  torch::Tensor slice = dist::reduceScatter(*ctx, input);
  expectClose(slice, torch::arange(2 * r, 2 * r + 2, f).reshape({2, 1}) * sum, "reduceScatter", r);

  dist::barrier(*ctx);

  // Bad input: named, before any rank waits on a collective.
  expectError([&] { dist::reduceScatter(*ctx, torch::ones({2 * n + 1}, f)); }, "multiple of the job's size",
              "reduceScatter of an uneven tensor", r);
  expectError([&] { torch::Tensor s = torch::ones({4}, f).slice(0, 0, 4, 2); dist::allReduce(*ctx, s); }, "not contiguous",
              "allReduce of a strided view", r);
  expectError([&] { torch::Tensor b = torch::ones({1}, f); dist::broadcast(*ctx, b, {.root = n}); }, "is not a rank of this job",
              "broadcast from a rank out of range", r);
  expectError([&] { torch::Tensor b = torch::ones({2}, torch::TensorOptions().dtype(torch::kBool).device(ctx->device())); dist::allReduce(*ctx, b); },
              "cannot be all-reduced", "allReduce of bool", r);

  dist::barrier(*ctx);
  if (failures == 0) std::printf("rank %d of %d: collectives ok\n", r, n);
  return failures == 0 ? 0 : 1;
}
