#include "models/hf_config.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <optional>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"

namespace dtrain::models {
namespace {

nlohmann::json readJson(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0) {
    throw ConfigError("'" + path + "': no such file; expected a Hugging Face model directory's JSON");
  }
  const std::string text = readRegularFile(path, "Hugging Face JSON");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("'" + path + "' is not valid JSON: " + e.what());
  }
}

// A config field: its value, or `fallback` when absent (none: required).
template <typename T>
T field(const nlohmann::json& j, const std::string& path, const std::string& key, std::optional<T> fallback = {}) {
  if (!j.contains(key) || j[key].is_null()) {
    if (fallback) return *fallback;
    throw ConfigError(path + ": no '" + key + "'; a Hugging Face config of this architecture has one");
  }
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw ConfigError(path + ": '" + key + "' is " + j[key].dump() + ", not of the expected type");
  }
}

void expectField(const nlohmann::json& j, const std::string& path, const std::string& key,
                 const nlohmann::json& expected, const std::string& why) {
  if (j.contains(key) && !j[key].is_null() && j[key] != expected) {
    throw ConfigError(path + ": '" + key + "' is " + j[key].dump() + "; dtrain computes " + why + " (expected " +
                      expected.dump() + ")");
  }
}

// The rotary embedding: transformers 4 writes rope_theta and rope_scaling
// (null, or {"rope_type" or "type": ..., factors}); transformers 5 one
// rope_parameters object holding rope_theta and rope_type beside the
// factors. "default" and "llama3" are what dtrain computes.
void readRope(const nlohmann::json& j, const std::string& path, LanguageModelConfig& c) {
  c.rope_theta = field<double>(j, path, "rope_theta", 10000.0);
  std::string key = "rope_scaling";
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) key = "rope_parameters";
  if (!j.contains(key) || j[key].is_null()) return;
  const nlohmann::json& r = j[key];
  const std::string where = path + ": '" + key + "'";
  if (!r.is_object()) throw ConfigError(where + " is " + r.dump() + ", not an object");
  if (key == "rope_parameters") c.rope_theta = field<double>(r, where, "rope_theta", c.rope_theta);
  const std::string type = field<std::string>(r, where, r.contains("rope_type") ? "rope_type" : "type", "default");
  if (type == "default") return;
  if (type != "llama3") {
    throw ConfigError(where + " has rope_type '" + type + "'; dtrain computes 'default' and 'llama3' rotary "
                      "frequencies");
  }
  c.rope_scaling.factor = field<double>(r, where, "factor");
  c.rope_scaling.low_freq_factor = field<double>(r, where, "low_freq_factor");
  c.rope_scaling.high_freq_factor = field<double>(r, where, "high_freq_factor");
  c.rope_scaling.original_max_position = field<int64_t>(r, where, "original_max_position_embeddings");
}

LanguageModelConfig llamaConfig(const nlohmann::json& j, const std::string& path) {
  LanguageModelConfig c;
  c.family = LmFamily::kLlama;
  c.name = "llama";
  c.dim = field<int64_t>(j, path, "hidden_size");
  c.ffn_dim = field<int64_t>(j, path, "intermediate_size");
  c.layers = field<int64_t>(j, path, "num_hidden_layers");
  c.heads = field<int64_t>(j, path, "num_attention_heads");
  c.kv_heads = field<int64_t>(j, path, "num_key_value_heads", c.heads);
  c.vocab_size = field<int64_t>(j, path, "vocab_size");
  c.max_seq_len = field<int64_t>(j, path, "max_position_embeddings", int64_t{2048});
  c.norm_eps = field<double>(j, path, "rms_norm_eps", 1e-6);
  c.tie_embeddings = field<bool>(j, path, "tie_word_embeddings", false);
  readRope(j, path, c);
  if (c.heads > 0 && c.dim % c.heads == 0) {
    expectField(j, path, "head_dim", c.dim / c.heads, "heads of hidden_size / num_attention_heads");
  }
  expectField(j, path, "hidden_act", "silu", "SwiGLU with silu");
  expectField(j, path, "attention_bias", false, "attention without biases");
  expectField(j, path, "mlp_bias", false, "the MLP without biases");
  return c;
}

LanguageModelConfig gpt2Config(const nlohmann::json& j, const std::string& path) {
  LanguageModelConfig c;
  c.family = LmFamily::kGpt2;
  c.name = "gpt2";
  c.dim = field<int64_t>(j, path, "n_embd");
  c.layers = field<int64_t>(j, path, "n_layer");
  c.heads = field<int64_t>(j, path, "n_head");
  c.kv_heads = c.heads;
  c.ffn_dim = field<int64_t>(j, path, "n_inner", 4 * c.dim);
  c.vocab_size = field<int64_t>(j, path, "vocab_size");
  c.max_seq_len = field<int64_t>(j, path, "n_positions", int64_t{1024});
  c.norm_eps = field<double>(j, path, "layer_norm_epsilon", 1e-5);
  c.tie_embeddings = field<bool>(j, path, "tie_word_embeddings", true);
  expectField(j, path, "activation_function", "gelu_new", "GPT-2's tanh-approximated GELU");
  return c;
}

}  // namespace

LanguageModelConfig readHfConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  const nlohmann::json j = readJson(path);
  const auto architectures = j.value("architectures", nlohmann::json::array());
  const std::string arch = architectures.is_array() && !architectures.empty() && architectures[0].is_string()
                               ? architectures[0].get<std::string>()
                               : j.value("model_type", std::string());
  LanguageModelConfig c;
  if (arch == "LlamaForCausalLM" || arch == "llama") {
    c = llamaConfig(j, path);
  } else if (arch == "GPT2LMHeadModel" || arch == "gpt2") {
    c = gpt2Config(j, path);
  } else {
    throw ConfigError(path + ": 'architectures' is " + j.value("architectures", nlohmann::json()).dump() +
                      "; dtrain loads LlamaForCausalLM and GPT2LMHeadModel");
  }
  c.seq_len = c.max_seq_len;
  validateLanguageModel(c);
  return c;
}

std::vector<std::string> hfWeightFiles(const std::string& dir) {
  const std::string index = dir + "/model.safetensors.index.json";
  if (std::filesystem::exists(index)) {
    const nlohmann::json j = readJson(index);
    if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
      throw ConfigError(index + ": no 'weight_map' object naming each tensor's file");
    }
    std::set<std::string> files;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        throw ConfigError(index + ": tensor '" + name + "' maps to " + file.dump() + "; expected a file name");
      }
      files.insert(file.get<std::string>());
    }
    std::vector<std::string> paths;
    for (const std::string& f : files) paths.push_back(dir + "/" + f);
    return paths;
  }
  const std::string single = dir + "/model.safetensors";
  if (!std::filesystem::exists(single)) {
    throw ConfigError("'" + dir + "': neither model.safetensors nor model.safetensors.index.json; expected a "
                      "Hugging Face model directory (save_pretrained's safetensors)");
  }
  return {single};
}

}  // namespace dtrain::models
