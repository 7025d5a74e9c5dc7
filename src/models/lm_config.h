// The shape of a transformer language model, torch-free, so that the dtrain
// binary can resolve and check --model/--layers/... without loading libtorch.
//
//   LanguageModelOverrides tiny;
//   tiny.layers = 2; tiny.dim = 64; tiny.heads = 4; tiny.seq_len = 64;
//   LanguageModelConfig c = namedLanguageModel("gpt2", tiny);  // validated
//
// Two families:
//   gpt2   as GPT-2: learned positions, pre-LayerNorm, GELU (tanh), biases,
//          tied input/output embeddings, one key/value head per query head.
//   llama  as Llama 3: RMSNorm, rotary positions (Meta's interleaved pairs),
//          SwiGLU, grouped-query attention, no biases; Llama 3.1+'s
//          long-context rotary scaling (RopeScaling) where a config has it.
// Named sizes (vocab 50257 / 128256 by default):
//   gpt2 = gpt2-124m  12 layers,  768 dim, 12 heads       (GPT-2 small)
//          gpt2-350m  24 layers, 1024 dim, 16 heads       (GPT-2 medium)
//          gpt2-774m  36 layers, 1280 dim, 20 heads       (GPT-2 large)
//          gpt2-1.5b  48 layers, 1600 dim, 25 heads       (GPT-2 XL)
//   llama = llama-1b  16 layers, 2048 dim, 32/8 heads, ffn 8192, tied   (Llama 3.2 1B)
//           llama-3b  28 layers, 3072 dim, 24/8 heads, ffn 8192, tied   (Llama 3.2 3B)
//           llama-8b  32 layers, 4096 dim, 32/8 heads, ffn 14336, untied (Llama 3 8B)
// Every error is a dtrain::ConfigError naming the option as the CLI spells
// it (--heads, --kv-heads, ...) and what was expected.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::models {

enum class LmFamily { kGpt2, kLlama };

// Llama 3.1's long-context rotary scaling (Hugging Face's rope_scaling of
// type "llama3"): a frequency whose wavelength 2 pi / f exceeds
// original_max_position / low_freq_factor is divided by `factor`, one whose
// wavelength is below original_max_position / high_freq_factor is kept, and
// those between are blended linearly in original_max_position / wavelength.
// factor 1 is no scaling.
struct RopeScaling {
  double factor = 1;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int64_t original_max_position = 8192;
  bool enabled() const { return factor != 1; }
};

// The rotary frequencies theta^(-2i / head_dim) for i < head_dim / 2, scaled.
std::vector<double> rotaryFrequencies(int64_t head_dim, double theta, const RopeScaling& scaling = {});

// "gpt2" | "llama".
const char* lmFamilyName(LmFamily family);

struct LanguageModelConfig {
  std::string name = "gpt2-124m";  // the named size it was derived from
  LmFamily family = LmFamily::kGpt2;
  int64_t layers = 12;
  int64_t dim = 768;
  int64_t heads = 12;
  int64_t kv_heads = 12;        // gpt2: always == heads
  int64_t ffn_dim = 3072;       // the MLP's hidden width
  // gpt2: rows of the learned position table, a hard limit. llama: length
  // of the rotary table it precomputes (rotary positions have no learned
  // limit, so a longer --seq-len raises it).
  int64_t max_seq_len = 1024;
  int64_t seq_len = 1024;       // the training sequence length T (FLOP counts)
  int64_t vocab_size = 50257;
  bool tie_embeddings = true;   // the output head reuses the token embedding
  double rope_theta = 500000;   // llama only
  RopeScaling rope_scaling;     // llama only
  double norm_eps = 1e-5;

  int64_t headDim() const { return dim / heads; }
  int64_t kvDim() const { return kv_heads * headDim(); }
};

// Values that replace a named size's; unset ones keep it. Changing --dim
// without --ffn-dim derives the MLP width from the new dim (gpt2: 4 x dim;
// llama: Meta's rule 8/3 x dim rounded up to a multiple of 256); heads and
// kv-heads never follow --dim, so a smaller dim usually needs --heads too.
struct LanguageModelOverrides {
  std::optional<int64_t> layers;
  std::optional<int64_t> dim;
  std::optional<int64_t> heads;
  std::optional<int64_t> kv_heads;
  std::optional<int64_t> ffn_dim;
  std::optional<int64_t> seq_len;
  // e.g. 50304, GPT-2's vocab padded to a multiple of 128 as llm.c does
  // (the extra rows are ordinary tokens that never occur; unlike llm.c's
  // kernel, the softmax is not masked to the first 50257).
  std::optional<int64_t> vocab_size;
  std::optional<bool> tie_embeddings;
  std::optional<double> rope_theta;
};

// True for the names of catalog.h's languageModelNames().
bool isLanguageModelName(const std::string& name);

// The named size with the overrides applied, validated. Throws ConfigError
// for an unknown name (listing the valid ones) or an invalid result.
LanguageModelConfig namedLanguageModel(const std::string& name, const LanguageModelOverrides& overrides = {});

// Throws ConfigError naming the first option that is out of range: a
// non-positive size, --heads not dividing --dim, --kv-heads not dividing
// --heads (or differing from it for gpt2), --seq-len above gpt2's learned
// positions, an odd head dim under rotary embeddings.
void validateLanguageModel(const LanguageModelConfig& config);

// The config as string pairs (safetensors' __metadata__ holds strings), and
// back; the reverse validates and names a missing or malformed key.
std::map<std::string, std::string> languageModelMetadata(const LanguageModelConfig& config);
LanguageModelConfig languageModelFromMetadata(const std::map<std::string, std::string>& metadata);

}  // namespace dtrain::models
