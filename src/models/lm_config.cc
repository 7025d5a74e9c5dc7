#include "models/lm_config.h"

#include "common/error.h"
#include "models/catalog.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace dtrain::models {
namespace {

LanguageModelConfig gpt2Size(const char* name, int64_t layers, int64_t dim, int64_t heads) {
  LanguageModelConfig c;
  c.name = name;
  c.family = LmFamily::kGpt2;
  c.layers = layers;
  c.dim = dim;
  c.heads = heads;
  c.kv_heads = heads;
  c.ffn_dim = 4 * dim;
  c.max_seq_len = 1024;
  c.seq_len = 1024;
  c.vocab_size = 50257;
  c.tie_embeddings = true;
  return c;
}

LanguageModelConfig llamaSize(const char* name, int64_t layers, int64_t dim, int64_t heads, int64_t ffn_dim,
                              bool tied) {
  LanguageModelConfig c;
  c.name = name;
  c.family = LmFamily::kLlama;
  c.layers = layers;
  c.dim = dim;
  c.heads = heads;
  c.kv_heads = 8;
  c.ffn_dim = ffn_dim;
  // Llama 3's pre-training context.
  c.max_seq_len = 8192;
  c.seq_len = 8192;
  c.vocab_size = 128256;
  c.tie_embeddings = tied;
  c.rope_theta = 500000;
  return c;
}

std::optional<LanguageModelConfig> namedSize(const std::string& name) {
  if (name == "gpt2" || name == "gpt2-124m") return gpt2Size("gpt2-124m", 12, 768, 12);
  if (name == "gpt2-350m") return gpt2Size("gpt2-350m", 24, 1024, 16);
  if (name == "gpt2-774m") return gpt2Size("gpt2-774m", 36, 1280, 20);
  if (name == "gpt2-1.5b") return gpt2Size("gpt2-1.5b", 48, 1600, 25);
  if (name == "llama" || name == "llama-1b") return llamaSize("llama-1b", 16, 2048, 32, 8192, true);
  if (name == "llama-3b") return llamaSize("llama-3b", 28, 3072, 24, 8192, true);
  if (name == "llama-8b") return llamaSize("llama-8b", 32, 4096, 32, 14336, false);
  return std::nullopt;
}

std::string joinedNames() {
  std::string joined;
  for (const auto& name : languageModelNames()) joined += (joined.empty() ? "" : ", ") + name;
  return joined;
}

// The MLP width a family derives from its model width: GPT-2's 4 x dim, and
// Meta's Llama rule (2/3 of 4 x dim, rounded up to a multiple of 256).
int64_t derivedFfnDim(LmFamily family, int64_t dim) {
  if (family == LmFamily::kGpt2) return 4 * dim;
  const int64_t hidden = 2 * (4 * dim) / 3;
  return (hidden + 255) / 256 * 256;
}

void requirePositive(const char* option, int64_t value) {
  if (value <= 0) {
    throw ConfigError(std::string(option) + " must be a positive whole number, got " + std::to_string(value));
  }
}

std::string formatDouble(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

std::string requiredKey(const std::map<std::string, std::string>& metadata, const std::string& key) {
  auto it = metadata.find(key);
  if (it == metadata.end()) throw ConfigError("language-model metadata lacks the key '" + key + "'");
  return it->second;
}

int64_t integerKey(const std::map<std::string, std::string>& metadata, const std::string& key) {
  const std::string text = requiredKey(metadata, key);
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw ConfigError("language-model metadata '" + key + "' is '" + text + "'; expected a whole number");
  }
  return value;
}

double realKey(const std::map<std::string, std::string>& metadata, const std::string& key) {
  const std::string text = requiredKey(metadata, key);
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw ConfigError("language-model metadata '" + key + "' is '" + text + "'; expected a number");
  }
  return value;
}

}  // namespace

const char* lmFamilyName(LmFamily family) { return family == LmFamily::kGpt2 ? "gpt2" : "llama"; }

bool isLanguageModelName(const std::string& name) {
  const auto& names = languageModelNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

LanguageModelConfig namedLanguageModel(const std::string& name, const LanguageModelOverrides& overrides) {
  std::optional<LanguageModelConfig> named = isLanguageModelName(name) ? namedSize(name) : std::nullopt;
  if (!named) throw ConfigError("unknown language model '" + name + "' (valid: " + joinedNames() + ")");
  LanguageModelConfig c = *named;
  const bool gpt2 = c.family == LmFamily::kGpt2;
  if (overrides.rope_theta && gpt2) {
    throw ConfigError("--rope-theta applies to llama models only; gpt2 learns its positions");
  }
  c.layers = overrides.layers.value_or(c.layers);
  if (overrides.dim && *overrides.dim != c.dim) {
    c.dim = *overrides.dim;
    c.ffn_dim = derivedFfnDim(c.family, c.dim);
  }
  c.heads = overrides.heads.value_or(c.heads);
  // GPT-2 has no grouped-query attention: its key/value heads follow --heads
  // unless a different --kv-heads is asked for, which validation rejects.
  c.kv_heads = overrides.kv_heads.value_or(gpt2 ? c.heads : c.kv_heads);
  c.ffn_dim = overrides.ffn_dim.value_or(c.ffn_dim);
  c.seq_len = overrides.seq_len.value_or(c.seq_len);
  if (!gpt2) c.max_seq_len = std::max(c.max_seq_len, c.seq_len);
  c.vocab_size = overrides.vocab_size.value_or(c.vocab_size);
  c.tie_embeddings = overrides.tie_embeddings.value_or(c.tie_embeddings);
  c.rope_theta = overrides.rope_theta.value_or(c.rope_theta);
  // Other dimensions than the named size's make another model: it goes by
  // its family's name (the dimensions say the rest), never by the size's.
  // (--seq-len alone trains the same weights.)
  const LanguageModelConfig& size = *named;
  if (c.layers != size.layers || c.dim != size.dim || c.heads != size.heads || c.kv_heads != size.kv_heads ||
      c.ffn_dim != size.ffn_dim || c.vocab_size != size.vocab_size || c.tie_embeddings != size.tie_embeddings ||
      c.rope_theta != size.rope_theta) {
    c.name = lmFamilyName(c.family);
  }
  validateLanguageModel(c);
  return c;
}

void validateLanguageModel(const LanguageModelConfig& c) {
  requirePositive("--layers", c.layers);
  requirePositive("--dim", c.dim);
  requirePositive("--heads", c.heads);
  requirePositive("--kv-heads", c.kv_heads);
  requirePositive("--ffn-dim", c.ffn_dim);
  requirePositive("--seq-len", c.seq_len);
  requirePositive("max_seq_len", c.max_seq_len);
  requirePositive("--vocab-size", c.vocab_size);
  const std::string model = std::string(lmFamilyName(c.family)) + " model '" + c.name + "': ";
  if (c.dim % c.heads != 0) {
    throw ConfigError(model + "--heads " + std::to_string(c.heads) + " must divide --dim " + std::to_string(c.dim));
  }
  if (c.family == LmFamily::kGpt2 && c.kv_heads != c.heads) {
    throw ConfigError(model + "--kv-heads applies to llama models only; gpt2 has one key/value head per query "
                      "head (got --kv-heads " + std::to_string(c.kv_heads) + " with --heads " +
                      std::to_string(c.heads) + ")");
  }
  if (c.heads % c.kv_heads != 0) {
    throw ConfigError(model + "--kv-heads " + std::to_string(c.kv_heads) + " must divide --heads " +
                      std::to_string(c.heads));
  }
  if (c.seq_len > c.max_seq_len) {
    throw ConfigError(model + "--seq-len " + std::to_string(c.seq_len) + " exceeds the model's " +
                      std::to_string(c.max_seq_len) + " positions");
  }
  if (c.family == LmFamily::kLlama && c.headDim() % 2 != 0) {
    throw ConfigError(model + "rotary embeddings need an even head dim (--dim / --heads), got " +
                      std::to_string(c.dim) + " / " + std::to_string(c.heads) + " = " + std::to_string(c.headDim()));
  }
  if (c.family == LmFamily::kLlama && !(c.rope_theta > 0)) {
    throw ConfigError(model + "--rope-theta must be positive, got " + formatDouble(c.rope_theta));
  }
  if (!(c.norm_eps > 0)) throw ConfigError(model + "norm_eps must be positive, got " + formatDouble(c.norm_eps));
  const RopeScaling& s = c.rope_scaling;
  if (s.enabled() && (c.family != LmFamily::kLlama || !(s.factor > 0) || !(s.low_freq_factor > 0) ||
                      !(s.high_freq_factor > s.low_freq_factor) || s.original_max_position <= 0)) {
    throw ConfigError(model + "rope scaling needs a llama model, a positive factor, 0 < low_freq_factor < "
                      "high_freq_factor and a positive original_max_position_embeddings (got factor " +
                      formatDouble(s.factor) + ", low " + formatDouble(s.low_freq_factor) + ", high " +
                      formatDouble(s.high_freq_factor) + ", original " + std::to_string(s.original_max_position) + ")");
  }
}

std::vector<double> rotaryFrequencies(int64_t head_dim, double theta, const RopeScaling& scaling) {
  std::vector<double> f;
  for (int64_t i = 0; i < head_dim; i += 2) {
    f.push_back(std::pow(theta, -static_cast<double>(i) / static_cast<double>(head_dim)));
  }
  if (!scaling.enabled()) return f;
  const double original = static_cast<double>(scaling.original_max_position);
  const double long_wavelength = original / scaling.low_freq_factor;
  const double short_wavelength = original / scaling.high_freq_factor;
  for (double& x : f) {
    const double wavelength = 2 * M_PI / x;
    if (wavelength > long_wavelength) {
      x /= scaling.factor;
    } else if (wavelength >= short_wavelength) {
      const double smooth = (original / wavelength - scaling.low_freq_factor) /
                            (scaling.high_freq_factor - scaling.low_freq_factor);
      x = (1 - smooth) * x / scaling.factor + smooth * x;
    }
  }
  return f;
}

std::map<std::string, std::string> languageModelMetadata(const LanguageModelConfig& c) {
  std::map<std::string, std::string> m{{"name", c.name},
          {"family", lmFamilyName(c.family)},
          {"layers", std::to_string(c.layers)},
          {"dim", std::to_string(c.dim)},
          {"heads", std::to_string(c.heads)},
          {"kv_heads", std::to_string(c.kv_heads)},
          {"ffn_dim", std::to_string(c.ffn_dim)},
          {"max_seq_len", std::to_string(c.max_seq_len)},
          {"seq_len", std::to_string(c.seq_len)},
          {"vocab_size", std::to_string(c.vocab_size)},
          {"tie_embeddings", c.tie_embeddings ? "true" : "false"},
          {"rope_theta", formatDouble(c.rope_theta)},
          {"norm_eps", formatDouble(c.norm_eps)}};
  if (c.rope_scaling.enabled()) {
    m["rope_scaling_factor"] = formatDouble(c.rope_scaling.factor);
    m["rope_scaling_low_freq_factor"] = formatDouble(c.rope_scaling.low_freq_factor);
    m["rope_scaling_high_freq_factor"] = formatDouble(c.rope_scaling.high_freq_factor);
    m["rope_scaling_original_max_position"] = std::to_string(c.rope_scaling.original_max_position);
  }
  return m;
}

LanguageModelConfig languageModelFromMetadata(const std::map<std::string, std::string>& metadata) {
  LanguageModelConfig c;
  c.name = requiredKey(metadata, "name");
  const std::string family = requiredKey(metadata, "family");
  if (family != "gpt2" && family != "llama") {
    throw ConfigError("language-model metadata 'family' is '" + family + "'; expected gpt2 or llama");
  }
  c.family = family == "gpt2" ? LmFamily::kGpt2 : LmFamily::kLlama;
  c.layers = integerKey(metadata, "layers");
  c.dim = integerKey(metadata, "dim");
  c.heads = integerKey(metadata, "heads");
  c.kv_heads = integerKey(metadata, "kv_heads");
  c.ffn_dim = integerKey(metadata, "ffn_dim");
  c.max_seq_len = integerKey(metadata, "max_seq_len");
  c.seq_len = integerKey(metadata, "seq_len");
  c.vocab_size = integerKey(metadata, "vocab_size");
  const std::string tied = requiredKey(metadata, "tie_embeddings");
  if (tied != "true" && tied != "false") {
    throw ConfigError("language-model metadata 'tie_embeddings' is '" + tied + "'; expected true or false");
  }
  c.tie_embeddings = tied == "true";
  c.rope_theta = realKey(metadata, "rope_theta");
  c.norm_eps = realKey(metadata, "norm_eps");
  if (metadata.count("rope_scaling_factor") != 0) {  // written only for a scaled rotary embedding
    c.rope_scaling.factor = realKey(metadata, "rope_scaling_factor");
    c.rope_scaling.low_freq_factor = realKey(metadata, "rope_scaling_low_freq_factor");
    c.rope_scaling.high_freq_factor = realKey(metadata, "rope_scaling_high_freq_factor");
    c.rope_scaling.original_max_position = integerKey(metadata, "rope_scaling_original_max_position");
  }
  validateLanguageModel(c);
  return c;
}

}  // namespace dtrain::models
