// dtrain's gpt2 and llama against the PyTorch reference bench/peers/lm_models.py:
// dtrain exports its weights (safetensors), the reference runs the same
// tokens and writes back logits, loss and gradients, and they must agree to
// float32 rounding (relative error <= 1e-5).
//
// The reference runs once for all cases (importing torch dominates its
// time), under $DTRAIN_TEST_PYTHON, else /usr/bin/python3 with Debian's
// python3-torch (scripts/setup.sh --peers).
#include "models/language_model.h"
#include "models/safetensors.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "tests/models/tensor_compare.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

namespace dtrain::models {
namespace {

using testing::TempDir;

struct ReferenceCase {
  ReferenceCase(std::string case_name, LanguageModelConfig case_config)
      : name(std::move(case_name)), config(std::move(case_config)) {}

  std::string name;  // also its files' prefix
  LanguageModelConfig config;
  std::shared_ptr<LanguageModel> model;  // built by runReference
  torch::Tensor tokens;
  torch::Tensor targets;
};

LanguageModelConfig small(const std::string& family, int64_t heads, int64_t kv_heads, bool tied) {
  LanguageModelOverrides o;
  o.layers = 2;
  o.dim = 64;
  o.heads = heads;
  if (family == "llama") o.kv_heads = kv_heads;
  o.seq_len = 24;
  o.vocab_size = 97;
  o.tie_embeddings = tied;
  return namedLanguageModel(family, o);
}

LanguageModelConfig llamaMultiHeadTheta10k() {
  LanguageModelOverrides o;
  o.layers = 1;
  o.dim = 32;
  o.heads = 2;
  o.kv_heads = 2;
  o.ffn_dim = 48;
  o.seq_len = 40;
  o.vocab_size = 64;
  o.rope_theta = 10000;
  return namedLanguageModel("llama-8b", o);
}

// The error that keeps the reference from running, "" when it ran.
std::string runReference(std::vector<ReferenceCase>& cases, const TempDir& dir) {
  std::string command = testing::testPython() + " " + testing::sourceDir() + "/bench/peers/lm_models.py";
  torch::manual_seed(11);
  for (ReferenceCase& c : cases) {
    c.model = createLanguageModel(c.config);
    c.tokens = torch::randint(c.config.vocab_size, {2, c.config.seq_len});
    c.targets = torch::randint(c.config.vocab_size, {2, c.config.seq_len});
    const std::string prefix = dir / c.name;
    saveModuleSafetensors(*c.model, prefix + ".weights", languageModelMetadata(c.config));
    writeSafetensors(prefix + ".batch", {{"tokens", c.tokens}, {"targets", c.targets}});
    command += " --weights " + prefix + ".weights --batch " + prefix + ".batch --out " + prefix + ".out";
  }
  const testing::CommandResult has_torch = testing::runCommand(testing::testPython() + " -c \"import torch\"", 120);
  if (has_torch.exit_code != 0) {
    return testing::testPython() + " cannot import torch: install Debian's python3-torch (scripts/setup.sh --peers) or "
           "point DTRAIN_TEST_PYTHON at a Python with torch.\n" + has_torch.output;
  }
  const testing::CommandResult run = testing::runCommand(command, 300);
  return run.exit_code == 0 ? "" : command + "\nfailed:\n" + run.output;
}

void compare(ReferenceCase& c, const TempDir& dir) {
  SCOPED_TRACE(c.name);
  std::map<std::string, torch::Tensor> reference;
  for (auto& [key, tensor] : readSafetensors(dir / (c.name + ".out")).tensors) reference[key] = tensor;
  EXPECT_LE(maxRelativeError(c.model->forward(c.tokens), reference.at("logits")), 1e-5);
  const torch::Tensor loss = c.model->loss(c.tokens, c.targets);
  EXPECT_LE(maxRelativeError(loss, reference.at("loss")), 1e-5);
  loss.backward();
  for (const auto& item : c.model->named_parameters()) {
    const auto it = reference.find("grad." + item.key());
    ASSERT_NE(it, reference.end()) << "the reference has no parameter " << item.key();
    EXPECT_LE(maxRelativeError(item.value().grad(), it->second), 1e-5) << item.key();
  }
  EXPECT_EQ(reference.size(), 2 + c.model->named_parameters().size());
}

// One test, so that ctest starts Python once: gpt2 tied and untied, llama
// with grouped-query attention tied and untied, llama multi-head with
// another rotary theta.
TEST(LmReferenceTest, LogitsLossAndGradientsMatchThePyTorchReference) {
  TempDir dir("lm-reference");
  std::vector<ReferenceCase> cases = {{"gpt2_tied", small("gpt2", 4, 4, true)},
                             {"gpt2_untied", small("gpt2", 8, 8, false)},
                             {"llama_gqa_untied", small("llama", 8, 2, false)},
                             {"llama_gqa_tied", small("llama", 4, 2, true)},
                             {"llama_mha_theta", llamaMultiHeadTheta10k()}};
  const std::string failure = runReference(cases, dir);
  ASSERT_TRUE(failure.empty()) << failure;
  for (ReferenceCase& c : cases) compare(c, dir);
}

}  // namespace
}  // namespace dtrain::models
