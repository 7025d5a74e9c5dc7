// Hugging Face model directories in and out (models/hf_checkpoint.h):
// directories written here in transformers' layout (names, Conv1D and
// split-halves rotary conventions, a sharded index, bf16 files, a tied head
// saved or not) load into dtrain, whose logits must equal those that
// bench/peers/hf_reference.py computes from the same files in
// transformers' conventions (float32, relative error <= 1e-5); exported
// back, a model's files load again to the same bits; what dtrain cannot
// load is a ConfigError naming the field or tensor.
#include "models/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "models/safetensors.h"
#include "tests/models/tensor_compare.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

namespace dtrain::models {
namespace {

using ::dtrain::testing::TempDir;

struct HfCase {
  std::string name;
  nlohmann::json config;
  NamedTensors tensors;
  int shards = 1;
  torch::ScalarType dtype = torch::kFloat;
};

torch::Tensor weight(std::vector<int64_t> shape) { return torch::randn(shape) * 0.2; }
torch::Tensor gain(int64_t n) { return 1 + torch::randn({n}) * 0.1; }

HfCase llamaCase(const std::string& name, int64_t heads, int64_t kv, bool tied, bool save_tied_head) {
  const int64_t d = 64, f = 96, layers = 2, vocab = 97, hd = d / heads;
  HfCase c{name,
           {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", d}, {"intermediate_size", f},
            {"num_hidden_layers", layers}, {"num_attention_heads", heads}, {"num_key_value_heads", kv},
            {"vocab_size", vocab}, {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
            {"tie_word_embeddings", tied}, {"hidden_act", "silu"}, {"rope_scaling", nullptr}},
           {}};
  c.tensors.emplace_back("model.embed_tokens.weight", weight({vocab, d}));
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    c.tensors.emplace_back(p + "input_layernorm.weight", gain(d));
    c.tensors.emplace_back(p + "self_attn.q_proj.weight", weight({heads * hd, d}));
    c.tensors.emplace_back(p + "self_attn.k_proj.weight", weight({kv * hd, d}));
    c.tensors.emplace_back(p + "self_attn.v_proj.weight", weight({kv * hd, d}));
    c.tensors.emplace_back(p + "self_attn.o_proj.weight", weight({d, heads * hd}));
    c.tensors.emplace_back(p + "post_attention_layernorm.weight", gain(d));
    c.tensors.emplace_back(p + "mlp.gate_proj.weight", weight({f, d}));
    c.tensors.emplace_back(p + "mlp.up_proj.weight", weight({f, d}));
    c.tensors.emplace_back(p + "mlp.down_proj.weight", weight({d, f}));
  }
  c.tensors.emplace_back("model.norm.weight", gain(d));
  if (!tied) c.tensors.emplace_back("lm_head.weight", weight({vocab, d}));
  if (tied && save_tied_head) c.tensors.emplace_back("lm_head.weight", c.tensors.front().second);
  return c;
}

// transformer.-less names (a GPT2Model's file) when `bare`, and the
// attention-mask buffers transformers saves beside the weights.
// Llama 3.1's scaled rotary frequencies (transformers 4's rope_scaling),
// with wavelengths on both sides of the blend at these 64 positions.
HfCase llama3ScaledCase(const std::string& name) {
  HfCase c = llamaCase(name, 4, 2, false, false);
  c.config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  return c;
}

// transformers 5's form: rope_theta inside rope_parameters.
HfCase ropeParametersCase(const std::string& name) {
  HfCase c = llamaCase(name, 4, 4, true, false);
  c.config.erase("rope_theta");
  c.config.erase("rope_scaling");
  c.config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  return c;
}

HfCase gpt2Case(const std::string& name, bool tied, bool bare) {
  const int64_t d = 64, heads = 4, layers = 2, vocab = 97, positions = 48;
  HfCase c{name,
           {{"architectures", {"GPT2LMHeadModel"}}, {"n_embd", d}, {"n_layer", layers}, {"n_head", heads},
            {"n_inner", nullptr}, {"vocab_size", vocab}, {"n_positions", positions},
            {"layer_norm_epsilon", 1e-5}, {"activation_function", "gelu_new"}, {"tie_word_embeddings", tied}},
           {}};
  const std::string t = bare ? "" : "transformer.";
  c.tensors.emplace_back(t + "wte.weight", weight({vocab, d}));
  c.tensors.emplace_back(t + "wpe.weight", weight({positions, d}));
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = t + "h." + std::to_string(i) + ".";
    c.tensors.emplace_back(p + "ln_1.weight", gain(d));
    c.tensors.emplace_back(p + "ln_1.bias", weight({d}));
    c.tensors.emplace_back(p + "attn.bias", torch::ones({1, 1, positions, positions}).tril());
    c.tensors.emplace_back(p + "attn.c_attn.weight", weight({d, 3 * d}));  // Conv1D: [in, out]
    c.tensors.emplace_back(p + "attn.c_attn.bias", weight({3 * d}));
    c.tensors.emplace_back(p + "attn.c_proj.weight", weight({d, d}));
    c.tensors.emplace_back(p + "attn.c_proj.bias", weight({d}));
    c.tensors.emplace_back(p + "ln_2.weight", gain(d));
    c.tensors.emplace_back(p + "ln_2.bias", weight({d}));
    c.tensors.emplace_back(p + "mlp.c_fc.weight", weight({d, 4 * d}));
    c.tensors.emplace_back(p + "mlp.c_fc.bias", weight({4 * d}));
    c.tensors.emplace_back(p + "mlp.c_proj.weight", weight({4 * d, d}));
    c.tensors.emplace_back(p + "mlp.c_proj.bias", weight({d}));
  }
  c.tensors.emplace_back(t + "ln_f.weight", gain(d));
  c.tensors.emplace_back(t + "ln_f.bias", weight({d}));
  if (!tied) c.tensors.emplace_back("lm_head.weight", weight({vocab, d}));
  return c;
}

void writeJson(const std::string& path, const nlohmann::json& j) { std::ofstream(path) << j.dump(2); }

// The case as save_pretrained lays it out: one file, or `shards` and an index.
std::string writeCase(const HfCase& c, const TempDir& dir) {
  const std::string path = dir / c.name;
  std::filesystem::create_directories(path);
  writeJson(path + "/config.json", c.config);
  NamedTensors cast;
  for (const auto& [name, t] : c.tensors) cast.emplace_back(name, t.to(c.dtype));
  if (c.shards == 1) {
    writeSafetensors(path + "/model.safetensors", cast);
    return path;
  }
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (int s = 0; s < c.shards; ++s) {
    NamedTensors part;
    const std::string file = "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(c.shards) + ".safetensors";
    for (size_t i = static_cast<size_t>(s); i < cast.size(); i += static_cast<size_t>(c.shards)) {
      part.push_back(cast[i]);
      index["weight_map"][cast[i].first] = file;
    }
    writeSafetensors(path + "/" + file, part);
  }
  writeJson(path + "/model.safetensors.index.json", index);
  return path;
}

std::shared_ptr<LanguageModel> imported(const std::string& path) {
  auto model = createLanguageModel(readHfConfig(path));
  loadHfWeights(*model, path);
  return model;
}

TEST(HfCheckpointTest, ImportedModelsComputeTransformersLogits) {
  TempDir dir("hf-import");
  torch::manual_seed(5);
  std::vector<HfCase> cases = {llamaCase("llama_gqa_untied", 8, 2, false, false),
                               llamaCase("llama_tied_head_saved", 4, 4, true, true),
                               gpt2Case("gpt2_tied", true, false), gpt2Case("gpt2_untied_bare", false, true),
                               llama3ScaledCase("llama3_scaled"), ropeParametersCase("rope_parameters")};
  cases[1].shards = 3;
  cases[1].dtype = torch::kBFloat16;
  std::string command = ::dtrain::testing::testPython() + " " + ::dtrain::testing::sourceDir() + "/bench/peers/hf_reference.py";
  const torch::Tensor tokens = torch::randint(97, {2, 20});
  writeSafetensors(dir / "batch", {{"tokens", tokens}});
  for (const HfCase& c : cases) {
    const std::string path = writeCase(c, dir);
    command += " --model " + path + " --batch " + (dir / "batch") + " --out " + (dir / (c.name + ".out"));
  }
  const ::dtrain::testing::CommandResult run = ::dtrain::testing::runCommand(command + " 2>&1", 300);
  ASSERT_EQ(run.exit_code, 0) << command << "\n" << run.output;
  for (const HfCase& c : cases) {
    SCOPED_TRACE(c.name);
    const auto model = imported(dir / c.name);
    const torch::Tensor want = readSafetensors(dir / (c.name + ".out")).tensors.at(0).second;
    torch::NoGradGuard no_grad;
    EXPECT_LE(maxRelativeError(model->forward(tokens), want), 1e-5);
  }
}

// Exported, then imported again: the same parameters, bit for bit; the
// exported file holds transformers' names and layouts (the original's).
TEST(HfCheckpointTest, ExportThenImportIsBitwise) {
  TempDir dir("hf-roundtrip");
  torch::manual_seed(6);
  for (const HfCase& c : {llamaCase("llama", 8, 2, false, false), gpt2Case("gpt2", true, false),
                          llama3ScaledCase("llama3_scaled")}) {
    SCOPED_TRACE(c.name);
    const auto model = imported(writeCase(c, dir));
    exportHf(*model, dir / (c.name + "_out"));
    const auto again = imported(dir / (c.name + "_out"));
    const LanguageModelConfig before = model->config(), after = again->config();
    EXPECT_EQ(after.rope_scaling.factor, before.rope_scaling.factor);
    EXPECT_EQ(after.rope_scaling.original_max_position, before.rope_scaling.original_max_position);
    EXPECT_EQ(after.rope_theta, before.rope_theta);
    const auto a = model->named_parameters(), b = again->named_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (const auto& item : a) EXPECT_TRUE(torch::equal(item.value(), b[item.key()])) << item.key();
    std::map<std::string, torch::Tensor> original(c.tensors.begin(), c.tensors.end());
    for (const auto& [name, t] : readSafetensors(dir / (c.name + "_out") + "/model.safetensors").tensors) {
      ASSERT_TRUE(original.count(name)) << name;
      EXPECT_TRUE(torch::equal(t, original[name])) << name;
    }
  }
}

// HfWeights' ranges (what a ZeRO-3 slice or a tensor-parallel part asks
// for), row-major and column-major, are those of the whole load's
// parameters, bit for bit: Conv1D weights transposed, q/k rows from halves,
// bf16 files and a sharded index; the bytes it counts are the ranges' (a
// q/k range that cuts rows: whole rows) and the files' at most.
TEST(HfCheckpointTest, RangesOfEachParameterInEitherOrderAreTheWholeLoads) {
  TempDir dir("hf-ranges");
  torch::manual_seed(8);
  HfCase bf16 = llamaCase("llama_bf16", 8, 2, false, false);
  bf16.dtype = torch::kBFloat16;
  bf16.shards = 3;
  for (const HfCase& c : {llamaCase("llama", 8, 2, false, false), gpt2Case("gpt2", true, false), bf16}) {
    SCOPED_TRACE(c.name);
    const std::string path = writeCase(c, dir);
    const auto model = imported(path);
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& item : model->named_parameters()) shapes[item.key()] = item.value().sizes().vec();
    HfWeights weights(path, model->config(), shapes);
    EXPECT_EQ(weights.bytesRead(), 0);
    int64_t asked = 0;
    for (const auto& item : model->named_parameters()) {
      const torch::Tensor& whole = item.value();
      const std::vector<std::vector<int64_t>> orders =
          whole.dim() == 2 ? std::vector<std::vector<int64_t>>{{}, {1, 0}} : std::vector<std::vector<int64_t>>{{}};
      for (const std::vector<int64_t>& order : orders) {
        const torch::Tensor laid = (order.empty() ? whole : whole.permute(order)).contiguous().view({-1});
        const int64_t n = laid.numel();
        for (const auto& [begin, count] : std::vector<std::pair<int64_t, int64_t>>{{0, n}, {n / 3, n / 2 - n / 3 + 1}, {n - 5, 5}}) {
          const torch::Tensor got = torch::full({count}, -7.0f);
          weights.read(item.key(), order, begin, got);
          EXPECT_TRUE(torch::equal(got, laid.narrow(0, begin, count))) << item.key() << " [" << begin << ", +" << count << ")";
          asked += count * (c.dtype == torch::kBFloat16 ? 2 : 4);
        }
      }
    }
    EXPECT_GE(weights.bytesRead(), asked);
    EXPECT_EQ(weights.tensorsRead(), weights.tensors());
  }
  // Half of a row-major weight: half of its bytes.
  HfCase llama = llamaCase("llama_half", 8, 2, false, false);
  const std::string path = writeCase(llama, dir);
  const auto model = imported(path);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& item : model->named_parameters()) shapes[item.key()] = item.value().sizes().vec();
  HfWeights weights(path, model->config(), shapes);
  const torch::Tensor w = model->named_parameters()["layers.0.feed_forward.w1.weight"];
  weights.read("layers.0.feed_forward.w1.weight", {}, 0, torch::empty({w.numel() / 2}));
  EXPECT_EQ(weights.bytesRead(), w.numel() / 2 * 4);
  EXPECT_EQ(weights.tensorsRead(), 1);
  int64_t data = 0;
  for (const auto& [name, t] : llama.tensors) data += t.numel() * 4;
  EXPECT_EQ(weights.dataBytes(), data);
}

// Directories transformers itself wrote (bench/peers/hf_transformers_check.py
// write DIR, where transformers is installed: bench/gpu/hf_acceptance.sh):
// dtrain's logits equal transformers' (1e-4), and dtrain's export of each
// goes to DIR/<name>.dtrain for from_pretrained (check.py load DIR).
TEST(HfCheckpointTest, TransformersWrittenDirectoriesLoadAndExport) {
  const char* dir = std::getenv("DTRAIN_HF_CHECK_DIR");
  if (dir == nullptr) GTEST_SKIP() << "no DTRAIN_HF_CHECK_DIR (bench/gpu/hf_acceptance.sh sets it)";
  const std::string root = dir;
  const torch::Tensor tokens = readSafetensors(root + "/tokens.safetensors").tensors.at(0).second;
  for (const char* name : {"llama_gqa", "llama_tied_sharded", "llama_bf16", "llama3_rope", "gpt2"}) {
    SCOPED_TRACE(name);
    const auto model = imported(root + "/" + name);
    const torch::Tensor want = readSafetensors(root + "/" + name + ".logits").tensors.at(0).second;
    torch::NoGradGuard no_grad;
    EXPECT_LE(maxRelativeError(model->forward(tokens), want), 1e-4);
    exportHf(*model, root + "/" + name + ".dtrain");
  }
}

std::string loadError(const HfCase& c, const TempDir& dir) {
  try {
    imported(writeCase(c, dir));
  } catch (const ConfigError& e) {
    return e.message();
  }
  return "";
}

TEST(HfCheckpointTest, WhatCannotLoadIsNamed) {
  TempDir dir("hf-bad");
  HfCase mistral = llamaCase("mistral", 4, 4, false, false);
  mistral.config["architectures"] = {"MistralForCausalLM"};
  EXPECT_NE(loadError(mistral, dir).find("'architectures' is [\"MistralForCausalLM\"]; dtrain loads LlamaForCausalLM"),
            std::string::npos);
  HfCase scaled = llamaCase("scaled", 4, 4, false, false);
  scaled.config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0}};
  EXPECT_NE(loadError(scaled, dir).find("'rope_scaling' has rope_type 'yarn'"), std::string::npos);
  scaled.config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_NE(loadError(scaled, dir).find("'rope_scaling': no 'low_freq_factor'"), std::string::npos);
  HfCase gelu = llamaCase("gelu", 4, 4, false, false);
  gelu.config["hidden_act"] = "gelu";
  EXPECT_NE(loadError(gelu, dir).find("'hidden_act' is \"gelu\""), std::string::npos);
  HfCase missing = llamaCase("missing", 4, 4, false, false);
  missing.tensors.pop_back();  // lm_head.weight
  EXPECT_NE(loadError(missing, dir).find("no file holds the model's 'output.weight'"), std::string::npos);
  HfCase extra = gpt2Case("extra", true, false);
  extra.tensors.emplace_back("transformer.h.9.ln_1.weight", gain(64));
  EXPECT_NE(loadError(extra, dir).find("tensor 'transformer.h.9.ln_1.weight' is no parameter"), std::string::npos);
  HfCase shape = gpt2Case("shape", true, false);
  shape.tensors[5].second = weight({3 * 64, 64});  // c_attn stored as a linear, not a Conv1D
  EXPECT_NE(loadError(shape, dir).find("tensor 'transformer.h.0.attn.c_attn.weight' has shape [192, 64]"),
            std::string::npos)
      << loadError(shape, dir);
  try {
    readHfConfig(dir / "nowhere");
    ADD_FAILURE() << "a directory without config.json";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("config.json': no such file"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace dtrain::models
