// Packed samples in a language model (Model::packedLoss, forwardPacked):
// a row holding several samples gives each the logits it gets alone (no
// attention across samples, positions restarting at each); the loss counts
// only targets that are not -100, on the plain libtorch path and the
// model's, no other sample changes it, and activation checkpointing's
// recomputation gives the same gradients.
#include <gtest/gtest.h>

#include "common/error.h"
#include "models/language_model.h"

namespace dtrain::models {
namespace {

LanguageModelConfig tinyPacked(const std::string& family) {
  LanguageModelOverrides o;
  o.layers = 2;
  o.dim = 32;
  o.heads = 4;
  o.kv_heads = family == "llama" ? 2 : 4;
  o.ffn_dim = 64;
  o.seq_len = 16;
  o.vocab_size = 64;
  return namedLanguageModel(family, o);
}

// One row of three samples (5, 7 and 3 tokens) and one padding token.
struct PackedRow {
  std::vector<torch::Tensor> samples;  // each int64 [1, n]
  torch::Tensor tokens, positions;     // [1, 16]
};

PackedRow packedRow() {
  torch::manual_seed(11);
  PackedRow row;
  std::vector<torch::Tensor> parts, positions;
  for (int64_t n : {5, 7, 3, 1}) {
    row.samples.push_back(torch::randint(0, 64, {1, n}, torch::kLong));
    parts.push_back(row.samples.back());
    positions.push_back(torch::arange(n, torch::kLong).unsqueeze(0));
  }
  row.samples.pop_back();  // the padding
  row.tokens = torch::cat(parts, 1);
  row.positions = torch::cat(positions, 1);
  return row;
}

void expectEachSampleAsAlone(const std::string& family, bool checkpointing) {
  torch::manual_seed(3);
  auto model = createLanguageModel(tinyPacked(family));
  model->setActivationCheckpointing(checkpointing);
  const PackedRow row = packedRow();
  const torch::Tensor packed = model->forwardPacked(row.tokens, row.positions);
  int64_t at = 0;
  for (const torch::Tensor& sample : row.samples) {
    const torch::Tensor alone = model->forward(sample);
    const torch::Tensor part = packed.narrow(1, at, sample.size(1));
    EXPECT_TRUE(torch::allclose(part, alone, /*rtol=*/0, /*atol=*/1e-5))
        << family << ": a sample at " << at << " differs by " << (part - alone).abs().max().item<double>();
    at += sample.size(1);
  }
  // Without the positions the row is one sequence: later samples see earlier ones.
  const torch::Tensor whole = model->forward(row.tokens);
  EXPECT_FALSE(torch::allclose(whole.narrow(1, 5, 7), packed.narrow(1, 5, 7), 0, 1e-3));
}

TEST(PackedSamplesTest, EachSampleOfALlamaRowGetsItsLogitsAlone) { expectEachSampleAsAlone("llama", false); }
TEST(PackedSamplesTest, EachSampleOfAGpt2RowGetsItsLogitsAlone) { expectEachSampleAsAlone("gpt2", false); }

// Gradients of packedLoss (targets in the second sample only), with or
// without activation checkpointing.
std::vector<torch::Tensor> packedGradients(const std::string& family, bool checkpointing, const torch::Tensor& tokens,
                                           const torch::Tensor& targets, const torch::Tensor& positions) {
  torch::manual_seed(5);
  auto model = createLanguageModel(tinyPacked(family));
  model->setActivationCheckpointing(checkpointing);
  model->packedLoss(tokens, targets, positions).backward();
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : model->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

TEST(PackedSamplesTest, TheLossIsTheMeanOverTheCountedTargetsAndNoOtherSampleChangesIt) {
  for (const std::string family : {"llama", "gpt2"}) {
    torch::manual_seed(5);
    auto model = createLanguageModel(tinyPacked(family));
    const PackedRow row = packedRow();
    torch::Tensor targets = torch::full({1, 16}, -100, torch::kLong);
    targets.narrow(1, 6, 3).copy_(torch::tensor({{4, 9, 1}}, torch::kLong));
    const torch::Tensor loss = model->packedLoss(row.tokens, targets, row.positions);
    // By hand: cross-entropy at the three counted positions of the packed logits.
    const torch::Tensor logits = model->forwardPacked(row.tokens, row.positions).detach();
    const torch::Tensor picked = logits.narrow(1, 6, 3).reshape({3, 64});
    const torch::Tensor expected = torch::nn::functional::cross_entropy(picked, torch::tensor({4, 9, 1}, torch::kLong));
    EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-5) << family;
    // The plain path (no fused kernel on the CPU) honours the ignore index too.
    const torch::Tensor plain = model->loss(row.samples[1], targets.narrow(1, 5, 7));
    const torch::Tensor alone = model->forward(row.samples[1]).detach().narrow(1, 1, 3).reshape({3, 64});
    EXPECT_NEAR(plain.item<double>(),
                torch::nn::functional::cross_entropy(alone, torch::tensor({4, 9, 1}, torch::kLong)).item<double>(),
                1e-5)
        << family;
    // Other tokens in the first and third samples: the same loss.
    torch::Tensor changed = row.tokens.clone();
    changed.narrow(1, 0, 5).copy_(torch::randint(0, 64, {1, 5}, torch::kLong));
    changed.narrow(1, 12, 4).copy_(torch::randint(0, 64, {1, 4}, torch::kLong));
    EXPECT_NEAR(model->packedLoss(changed, targets, row.positions).item<double>(), loss.item<double>(), 1e-6)
        << family;
    // Backward's recomputation under activation checkpointing sees the same samples.
    const std::vector<torch::Tensor> stored = packedGradients(family, false, row.tokens, targets, row.positions);
    const std::vector<torch::Tensor> recomputed = packedGradients(family, true, row.tokens, targets, row.positions);
    ASSERT_EQ(stored.size(), recomputed.size());
    for (size_t i = 0; i < stored.size(); ++i) {
      EXPECT_TRUE(torch::allclose(stored[i], recomputed[i], 0, 1e-6)) << family << " parameter " << i;
    }
  }
}

TEST(PackedSamplesTest, PositionsOfAnotherShapeAreRefused) {
  auto model = createLanguageModel(tinyPacked("llama"));
  const torch::Tensor tokens = torch::zeros({2, 8}, torch::kLong);
  EXPECT_THROW(model->packedLoss(tokens, tokens, torch::zeros({2, 7}, torch::kLong)), ConfigError);
  EXPECT_THROW(model->forwardPacked(tokens, torch::zeros({2, 8}, torch::kInt)), ConfigError);
}

}  // namespace
}  // namespace dtrain::models
