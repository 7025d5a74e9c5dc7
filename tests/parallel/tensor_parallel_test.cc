// Tensor parallelism's communication (parallel/tensor_parallel.h) with
// ranks as threads over Gloo: a Megatron MLP split column- then row-wise,
// with and without sequence parallelism, a vocab-split embedding and the
// vocab-parallel cross-entropy each give the unsplit computation's values
// and gradients (the shards' gradients are the matching slices of the
// whole one's); a group of one adds nothing; misuse is a ConfigError.
//
// Tolerance: float32 sums taken in another order (a partial product per
// rank, then the all-reduce) differ from the unsplit ones by a few units
// in the last place of the largest term: 1e-5 relative plus 1e-6 absolute
// for values of order 1.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "comm/communicator.h"
#include "common/error.h"
#include "parallel/tensor_parallel.h"
#include "store/hash_store.h"
#include "tests/comm/rank_threads.h"
#include "tests/support/text.h"

namespace dtrain {
namespace {

using testing::configErrorOf;

constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

void expectClose(const torch::Tensor& actual, const torch::Tensor& expected, const std::string& what) {
  ASSERT_TRUE(actual.sizes().equals(expected.sizes())) << what << ": shape " << actual.sizes() << " vs "
                                                       << expected.sizes();
  EXPECT_TRUE(torch::allclose(actual.to(torch::kFloat), expected.to(torch::kFloat), kRtol, kAtol))
      << what << ": largest difference " << (actual.to(torch::kFloat) - expected.to(torch::kFloat)).abs().max().item<float>();
}

// Runs body(rank, group) on `size` rank threads over one in-memory store.
void onRanks(int size, const std::function<void(int, TensorParallelGroup&)>& body) {
  auto store = std::make_shared<HashStore>();
  const auto errors = testing::runOnRankThreads(size, [&](int rank) {
    auto group = TensorParallelGroup::create(createCommunicator("gloo", store, rank, size), std::chrono::seconds(60));
    body(rank, *group);
  });
  for (int rank = 0; rank < size; ++rank) EXPECT_EQ(testing::errorText(errors[rank]), "") << "rank " << rank;
}

// The unsplit MLP of one rank's view: y = gelu(x W1^T + b1) W2^T.
struct Mlp {
  torch::Tensor w1, b1, w2;  // [H, D], [H], [D, H]
};

Mlp wholeMlp(int64_t dim, int64_t hidden) {
  torch::manual_seed(7);
  return {torch::randn({hidden, dim}), torch::randn({hidden}), torch::randn({dim, hidden}) / 8};
}

torch::Tensor runMlp(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1, const torch::Tensor& w2) {
  return torch::gelu(torch::linear(x, w1, b1)).matmul(w2.t());
}

class TensorParallelTest : public ::testing::TestWithParam<bool> {};  // sequence parallelism off / on

TEST_P(TensorParallelTest, AColumnThenRowSplitMlpEqualsTheWholeOne) {
  const bool sequence_parallel = GetParam();
  const int tp = 2;
  const int64_t batch = 2, seq = 6, dim = 8, hidden = 16;
  const Mlp mlp = wholeMlp(dim, hidden);
  torch::manual_seed(11);
  const torch::Tensor x = torch::randn({batch, seq, dim});
  const torch::Tensor upstream = torch::randn({batch, seq, dim});  // d(loss)/d(y)

  // The whole computation's values and gradients.
  Mlp whole{mlp.w1.clone().requires_grad_(), mlp.b1.clone().requires_grad_(), mlp.w2.clone().requires_grad_()};
  const torch::Tensor whole_x = x.clone().requires_grad_();
  const torch::Tensor whole_y = runMlp(whole_x, whole.w1, whole.b1, whole.w2);
  (whole_y * upstream).sum().backward();

  onRanks(tp, [&](int rank, TensorParallelGroup& group) {
    const torch::Tensor w1 = mlp.w1.chunk(tp, 0)[rank].clone().requires_grad_();  // column-parallel: output rows
    const torch::Tensor b1 = mlp.b1.chunk(tp, 0)[rank].clone().requires_grad_();
    const torch::Tensor w2 = mlp.w2.chunk(tp, 1)[rank].clone().requires_grad_();  // row-parallel: input columns
    torch::Tensor in, y;
    if (sequence_parallel) {
      in = x.chunk(tp, 1)[rank].clone().requires_grad_();
      y = tp::reduceScatterSequence(runMlp(tp::gatherSequence(in, group, 1), w1, b1, w2), group, 1);
      ASSERT_EQ(y.size(1), seq / tp);
      (y * upstream.chunk(tp, 1)[rank]).sum().backward();
      expectClose(y, whole_y.detach().chunk(tp, 1)[rank], "y's sequence shard");
      expectClose(in.grad(), whole_x.grad().chunk(tp, 1)[rank], "x's sequence shard's gradient");
    } else {
      in = x.clone().requires_grad_();
      y = tp::reduceFromRegion(runMlp(tp::copyToRegion(in, group), w1, b1, w2), group);
      (y * upstream).sum().backward();
      expectClose(y, whole_y.detach(), "y");
      expectClose(in.grad(), whole_x.grad(), "x's gradient (summed over the ranks by copyToRegion)");
    }
    expectClose(w1.grad(), whole.w1.grad().chunk(tp, 0)[rank], "W1's row shard's gradient");
    expectClose(b1.grad(), whole.b1.grad().chunk(tp, 0)[rank], "b1's shard's gradient");
    expectClose(w2.grad(), whole.w2.grad().chunk(tp, 1)[rank], "W2's column shard's gradient");
  });
}

INSTANTIATE_TEST_SUITE_P(SequenceParallel, TensorParallelTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "on" : "off"; });

// The overlapped products (tp::sequenceParallelColumnLinears and
// sequenceParallelRowLinear) against the whole computation, for every
// piece count the part of 6 positions takes (5 falls back to 3).
class OverlappedProductsTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(OverlappedProductsTest, TheyEqualTheWholeProductsAndTheirGradients) {
  const int64_t chunks = GetParam();
  const int tp = 2;
  const int64_t batch = 2, seq = 12, dim = 8, width = 6;
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({batch, seq, dim});
  const std::vector<torch::Tensor> w{torch::randn({width, dim}), torch::randn({width, dim}), torch::randn({2 * width, dim})};
  const torch::Tensor b0 = torch::randn({width}), b2 = torch::randn({2 * width});
  const torch::Tensor wo = torch::randn({dim, 4 * width}) / 4;
  const torch::Tensor upstream = torch::randn({batch, seq, dim});

  // Whole: three column products (two with biases), their outputs joined and projected.
  std::vector<torch::Tensor> whole_w;
  for (const torch::Tensor& t : w) whole_w.push_back(t.clone().requires_grad_());
  const torch::Tensor whole_b0 = b0.clone().requires_grad_(), whole_b2 = b2.clone().requires_grad_();
  const torch::Tensor whole_wo = wo.clone().requires_grad_();
  const torch::Tensor whole_x = x.clone().requires_grad_();
  const torch::Tensor joined = torch::cat({torch::linear(whole_x, whole_w[0], whole_b0), torch::linear(whole_x, whole_w[1]),
                                          torch::linear(whole_x, whole_w[2], whole_b2)}, -1);
  const torch::Tensor whole_y = torch::linear(torch::tanh(joined), whole_wo);
  (whole_y * upstream).sum().backward();

  onRanks(tp, [&](int rank, TensorParallelGroup& group) {
    std::vector<torch::Tensor> mine;  // each weight's output rows of this rank
    for (const torch::Tensor& t : w) mine.push_back(t.chunk(tp, 0)[rank].clone().requires_grad_());
    const torch::Tensor mine_b0 = b0.chunk(tp, 0)[rank].clone().requires_grad_();
    const torch::Tensor mine_b2 = b2.chunk(tp, 0)[rank].clone().requires_grad_();
    // wo's input columns of this rank: the columns its three outputs fill.
    const std::vector<torch::Tensor> wo_blocks = wo.split({width, width, 2 * width}, 1);
    const torch::Tensor mine_wo = torch::cat({wo_blocks[0].chunk(tp, 1)[rank], wo_blocks[1].chunk(tp, 1)[rank],
                                              wo_blocks[2].chunk(tp, 1)[rank]}, 1).clone().requires_grad_();
    const torch::Tensor in = x.chunk(tp, 1)[rank].clone().requires_grad_();
    const std::vector<torch::Tensor> outs =
        tp::sequenceParallelColumnLinears(in, mine, {mine_b0, torch::Tensor(), mine_b2}, group, chunks);
    ASSERT_EQ(outs.size(), 3u);
    ASSERT_EQ(outs[2].sizes(), (std::vector<int64_t>{batch, seq, width}));
    const torch::Tensor y = tp::sequenceParallelRowLinear(torch::tanh(torch::cat(outs, -1)), mine_wo, group, chunks);
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{batch, seq / tp, dim}));
    (y * upstream.chunk(tp, 1)[rank]).sum().backward();
    expectClose(y, whole_y.detach().chunk(tp, 1)[rank], "y's sequence shard");
    expectClose(in.grad(), whole_x.grad().chunk(tp, 1)[rank], "x's sequence shard's gradient");
    for (size_t i = 0; i < w.size(); ++i) {
      expectClose(mine[i].grad(), whole_w[i].grad().chunk(tp, 0)[rank], "weight " + std::to_string(i) + "'s gradient");
    }
    expectClose(mine_b0.grad(), whole_b0.grad().chunk(tp, 0)[rank], "bias 0's gradient");
    expectClose(mine_b2.grad(), whole_b2.grad().chunk(tp, 0)[rank], "bias 2's gradient");
    const std::vector<torch::Tensor> g_blocks = whole_wo.grad().split({width, width, 2 * width}, 1);
    expectClose(mine_wo.grad(), torch::cat({g_blocks[0].chunk(tp, 1)[rank], g_blocks[1].chunk(tp, 1)[rank],
                                            g_blocks[2].chunk(tp, 1)[rank]}, 1), "the row product's weight's gradient");
  });
}

INSTANTIATE_TEST_SUITE_P(Pieces, OverlappedProductsTest, ::testing::Values(1, 2, 3, 5),
                         [](const ::testing::TestParamInfo<int64_t>& info) { return std::to_string(info.param); });

TEST(TensorParallelOpsTest, OverlappedProductsOfBadShapesAreAConfigErrorNamingThem) {
  onRanks(2, [&](int, TensorParallelGroup& group) {
    EXPECT_EQ(configErrorOf([&] {
                tp::sequenceParallelColumnLinears(torch::zeros({2, 3, 4}), {torch::zeros({6, 5})}, {}, group, 2);
              }),
              "tensor parallelism: the sequence-parallel column products take x [B, T/tp, d] and 1 to 3 weights "
              "[n, d] (biases [n]) of x's dtype, got x [2, 3, 4] and weights [6, 5]");
    EXPECT_EQ(configErrorOf([&] { tp::sequenceParallelRowLinear(torch::zeros({2, 5, 4}), torch::zeros({3, 4}), group, 2); }),
              "tensor parallelism: the sequence-parallel row product takes x [B, T, f] (T a multiple of tp 2) and a "
              "weight [d, f] of x's dtype, got x [2, 5, 4] and weight [3, 4]");
  });
}

TEST(TensorParallelOpsTest, SplitSequenceKeepsThisRanksPartAndGathersTheGradient) {
  const torch::Tensor x = torch::arange(24, torch::kFloat).reshape({2, 6, 2});
  onRanks(3, [&](int rank, TensorParallelGroup& group) {
    const torch::Tensor in = x.clone().requires_grad_();
    const torch::Tensor part = tp::splitSequence(in, group, 1);
    EXPECT_TRUE(torch::equal(part, x.chunk(3, 1)[rank]));
    (part * (rank + 1)).sum().backward();
    // Every rank's gradient gathered: rank r's positions carry r + 1.
    const torch::Tensor expected = torch::cat({torch::full({2, 2, 2}, 1.0), torch::full({2, 2, 2}, 2.0),
                                               torch::full({2, 2, 2}, 3.0)}, 1);
    EXPECT_TRUE(torch::equal(in.grad(), expected));
  });
}

TEST(TensorParallelOpsTest, AVocabSplitEmbeddingSumsToTheWholeLookup) {
  const int tp = 2;
  const int64_t vocab = 10, dim = 4;
  torch::manual_seed(3);
  const torch::Tensor table = torch::randn({vocab, dim});
  const torch::Tensor tokens = torch::tensor({0, 4, 5, 9, 5, 2}, torch::kLong).reshape({2, 3});
  const torch::Tensor whole_table = table.clone().requires_grad_();
  const torch::Tensor whole = torch::embedding(whole_table, tokens);
  whole.sum().backward();
  onRanks(tp, [&](int rank, TensorParallelGroup& group) {
    const torch::Tensor shard = table.chunk(tp, 0)[rank].clone().requires_grad_();
    const torch::Tensor partial = tp::vocabShardEmbedding(tokens, shard, rank * vocab / tp);
    const torch::Tensor out = tp::reduceFromRegion(partial, group);
    expectClose(out, whole.detach(), "the looked-up rows");
    out.sum().backward();
    expectClose(shard.grad(), whole_table.grad().chunk(tp, 0)[rank], "the shard's gradient");
  });
}

TEST(TensorParallelOpsTest, VocabParallelCrossEntropyEqualsTheWholeOneWithoutGatheringLogits) {
  for (const torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const int tp = 2;
    const int64_t n = 5, vocab = 12;
    torch::manual_seed(5);
    const torch::Tensor logits = (torch::randn({n, vocab}) * 4).to(dtype);
    const torch::Tensor targets = torch::tensor({0, 5, 6, 11, 3}, torch::kLong);  // both shards' columns
    const torch::Tensor whole_logits = logits.clone().requires_grad_();
    const torch::Tensor whole = torch::nn::functional::cross_entropy(
        whole_logits.to(torch::kFloat), targets,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    (whole * torch::arange(1, n + 1, torch::kFloat)).sum().backward();
    onRanks(tp, [&](int rank, TensorParallelGroup& group) {
      const torch::Tensor shard = logits.chunk(tp, 1)[rank].clone().requires_grad_();
      const torch::Tensor loss = tp::vocabParallelCrossEntropy(shard, targets, rank * vocab / tp, group);
      EXPECT_EQ(loss.scalar_type(), torch::kFloat);
      expectClose(loss, whole.detach(), "the loss per position");
      (loss * torch::arange(1, n + 1, torch::kFloat)).sum().backward();
      EXPECT_EQ(shard.grad().scalar_type(), dtype);
      const torch::Tensor expected = whole_logits.grad().chunk(tp, 1)[rank];
      if (dtype == torch::kFloat) {
        expectClose(shard.grad(), expected, "the shard's gradient");
      } else {  // both rounded to bf16 once: within one bf16 step (2^-8 relative)
        EXPECT_TRUE(torch::allclose(shard.grad().to(torch::kFloat), expected.to(torch::kFloat), 1.0 / 128, 1e-3));
      }
    });
  }
}

// The classifier and the loss in one, a few rows at a time (chunks of 2 and
// 3 rows, and one chunk): the loss and the gradients of the hidden state
// and of each rank's weight rows equal the whole classifier's.
TEST(TensorParallelOpsTest, ChunkedVocabParallelClassifierEqualsTheWholeOne) {
  const int tp = 2;
  const int64_t n = 7, dim = 6, vocab = 12;
  torch::manual_seed(6);
  const torch::Tensor hidden = torch::randn({n, dim});
  const torch::Tensor weight = torch::randn({vocab, dim});
  const torch::Tensor targets = torch::tensor({0, 5, 6, 11, 3, 7, 9}, torch::kLong);
  const torch::Tensor whole_hidden = hidden.clone().requires_grad_(), whole_weight = weight.clone().requires_grad_();
  const torch::Tensor whole = torch::nn::functional::cross_entropy(
      torch::matmul(whole_hidden, whole_weight.t()), targets,
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  (whole * torch::arange(1, n + 1, torch::kFloat)).sum().backward();
  for (const int64_t chunk : {int64_t{2}, int64_t{3}, int64_t{0}}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    onRanks(tp, [&](int rank, TensorParallelGroup& group) {
      const torch::Tensor h = hidden.clone().requires_grad_();
      const torch::Tensor w = weight.chunk(tp, 0)[rank].clone().requires_grad_();
      const torch::Tensor loss =
          tp::vocabParallelClassifierCrossEntropy(h, w, targets, rank * vocab / tp, group, chunk);
      expectClose(loss, whole.detach(), "the loss per position");
      (loss * torch::arange(1, n + 1, torch::kFloat)).sum().backward();
      expectClose(w.grad(), whole_weight.grad().chunk(tp, 0)[rank], "this rank's weight rows' gradient");
      // Each rank's part of the hidden state's gradient: its columns' share; summed, the whole.
      torch::Tensor sum = h.grad().contiguous().clone();
      group.allReduce(sum);
      expectClose(sum, whole_hidden.grad(), "the hidden state's gradient, summed over the ranks");
    });
  }
}

TEST(TensorParallelOpsTest, AGroupOfOneIsTheIdentityWithoutCollectives) {
  onRanks(1, [&](int, TensorParallelGroup& group) {
    const torch::Tensor x = torch::randn({2, 4, 3}).requires_grad_();
    EXPECT_TRUE(tp::copyToRegion(x, group).is_same(x));
    EXPECT_TRUE(tp::reduceFromRegion(x, group).is_same(x));
    EXPECT_TRUE(tp::gatherSequence(x, group, 1).is_same(x));
    EXPECT_TRUE(tp::reduceScatterSequence(x, group, 1).is_same(x));
    EXPECT_TRUE(tp::splitSequence(x, group, 1).is_same(x));
    const torch::Tensor logits = torch::randn({3, 7}).requires_grad_();
    const torch::Tensor targets = torch::tensor({1, 6, 0}, torch::kLong);
    const torch::Tensor loss = tp::vocabParallelCrossEntropy(logits, targets, 0, group);
    const torch::Tensor whole = torch::nn::functional::cross_entropy(
        logits, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    expectClose(loss, whole.detach(), "the loss");
  });
}

TEST(TensorParallelOpsTest, MisuseIsAConfigErrorNamingTheShape) {
  onRanks(2, [&](int, TensorParallelGroup& group) {
    const torch::Tensor odd = torch::zeros({2, 5, 3});
    EXPECT_EQ(configErrorOf([&] { tp::reduceScatterSequence(odd, group, 1); }),
              "tensor parallelism: reduceScatterSequence: the shape [2, 5, 3] does not split into 2 equal parts "
              "along dimension 1 (tp 2)");
    EXPECT_EQ(configErrorOf([&] { tp::splitSequence(odd, group, 3); }),
              "tensor parallelism: splitSequence: dimension 3 of a tensor of shape [2, 5, 3] does not exist");
    EXPECT_EQ(configErrorOf([&] {
                tp::vocabParallelCrossEntropy(torch::zeros({4, 6}), torch::zeros({3}, torch::kLong), 0, group);
              }),
              "tensor parallelism: vocab-parallel cross-entropy takes logits [N, V/tp] and int64 targets [N], got "
              "[4, 6] and [3] Long");
  });
  EXPECT_EQ(configErrorOf([] { TensorParallelGroup::create(nullptr, std::chrono::seconds(1)); }),
            "tensor parallelism: the tensor-parallel group has no communicator");
}

TEST(TensorParallelOpsTest, ABackwardAfterItsGroupIsGoneIsAConfigError) {
  auto store = std::make_shared<HashStore>();
  const auto errors = testing::runOnRankThreads(2, [&](int rank) {
    torch::Tensor x = torch::ones({2, 2}).requires_grad_();
    torch::Tensor y;
    {
      auto group = TensorParallelGroup::create(createCommunicator("gloo", store, rank, 2), std::chrono::seconds(60));
      y = tp::copyToRegion(x, *group).sum();
    }
    EXPECT_EQ(configErrorOf([&] { y.backward(); }).rfind("tensor parallelism: a backward ran after its "
                                                           "tensor-parallel group (id ", 0),
              0u);
  });
  for (const auto& e : errors) EXPECT_EQ(testing::errorText(e), "");
}

}  // namespace
}  // namespace dtrain
