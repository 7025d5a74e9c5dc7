#include "models/hf_checkpoint.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "models/safetensors.h"

namespace dtrain::models {
namespace {

namespace fs = std::filesystem;

std::string shapeOf(c10::IntArrayRef sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + "]";
}

enum class Transform { kNone, kTranspose, kRotaryHeads, kRotaryKvHeads };

struct Target {
  std::string name;  // dtrain's parameter
  Transform transform = Transform::kNone;
};

// dtrain's name (and the transform) of a Hugging Face tensor, if any.
std::optional<Target> targetOf(LmFamily family, std::string hf) {
  const auto starts = [&hf](const std::string& p) { return hf.rfind(p, 0) == 0; };
  const auto ends = [&hf](const std::string& s) { return hf.size() >= s.size() && hf.compare(hf.size() - s.size(), s.size(), s) == 0; };
  if (family == LmFamily::kLlama) {
    if (hf == "model.embed_tokens.weight") return Target{"tok_embeddings.weight"};
    if (hf == "model.norm.weight") return Target{"norm.weight"};
    if (hf == "lm_head.weight") return Target{"output.weight"};
    if (!starts("model.layers.")) return std::nullopt;
    const size_t dot = hf.find('.', 13);
    const std::string prefix = "layers." + hf.substr(13, dot - 13) + ".", rest = hf.substr(dot + 1);
    static const std::map<std::string, Target> kBlock = {
        {"input_layernorm.weight", {"attention_norm.weight"}},
        {"post_attention_layernorm.weight", {"ffn_norm.weight"}},
        {"self_attn.q_proj.weight", {"attention.wq.weight", Transform::kRotaryHeads}},
        {"self_attn.k_proj.weight", {"attention.wk.weight", Transform::kRotaryKvHeads}},
        {"self_attn.v_proj.weight", {"attention.wv.weight"}},
        {"self_attn.o_proj.weight", {"attention.wo.weight"}},
        {"mlp.gate_proj.weight", {"feed_forward.w1.weight"}},
        {"mlp.down_proj.weight", {"feed_forward.w2.weight"}},
        {"mlp.up_proj.weight", {"feed_forward.w3.weight"}}};
    auto it = kBlock.find(rest);
    if (it == kBlock.end()) return std::nullopt;
    return Target{prefix + it->second.name, it->second.transform};
  }
  if (hf == "lm_head.weight") return Target{"lm_head.weight"};
  if (!starts("transformer.")) hf = "transformer." + hf;  // a GPT2Model's file
  for (const char* conv : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
    if (ends(conv)) return Target{hf, Transform::kTranspose};
  }
  return Target{hf};
}

// What transformers keeps beside the weights and dtrain computes itself.
bool ignored(const std::string& hf) {
  const auto ends = [&hf](const std::string& s) { return hf.size() >= s.size() && hf.compare(hf.size() - s.size(), s.size(), s) == 0; };
  return ends(".attn.bias") || ends(".attn.masked_bias") || ends("rotary_emb.inv_freq");
}

// transformers' halves layout of a q/k projection's rows -> dtrain's interleaved pairs.
torch::Tensor fromHalves(const torch::Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0), cols = w.size(1), half = rows / heads / 2;
  return w.reshape({heads, 2, half, cols}).transpose(1, 2).reshape({rows, cols});
}

torch::Tensor toHalves(const torch::Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0), cols = w.size(1), half = rows / heads / 2;
  return w.reshape({heads, half, 2, cols}).transpose(1, 2).reshape({rows, cols});
}

}  // namespace

HfLoadReport loadHfWeights(LanguageModel& model, const std::string& dir) {
  const auto started = std::chrono::steady_clock::now();
  const LanguageModelConfig& c = model.config();
  std::map<std::string, torch::Tensor> params;
  for (auto& item : model.named_parameters(/*recurse=*/true)) params[item.key()] = item.value();
  std::set<std::string> filled;
  HfLoadReport report;
  torch::NoGradGuard no_grad;
  for (const std::string& file : hfWeightFiles(dir)) {
    ++report.files;
    report.bytes += static_cast<int64_t>(fs::file_size(file));
    for (auto& [hf, value] : readSafetensors(file).tensors) {
      if (ignored(hf)) continue;
      const std::optional<Target> target = targetOf(c.family, hf);
      auto it = target ? params.find(target->name) : params.end();
      if (it == params.end()) {
        // A tied head may be saved beside the embedding it is.
        if (c.tie_embeddings && (hf == "lm_head.weight")) continue;
        throw ConfigError(file + ": tensor '" + hf + "' is no parameter of a " + lmFamilyName(c.family) +
                          " model of this config");
      }
      torch::Tensor v = value;
      switch (target->transform) {
        case Transform::kTranspose: v = v.t(); break;
        case Transform::kRotaryHeads: v = fromHalves(v, c.heads); break;
        case Transform::kRotaryKvHeads: v = fromHalves(v, c.kv_heads); break;
        case Transform::kNone: break;
      }
      if (!v.sizes().equals(it->second.sizes())) {
        throw ConfigError(file + ": tensor '" + hf + "' has shape " + shapeOf(value.sizes()) + "; the model's '" +
                          target->name + "' needs " + shapeOf(it->second.sizes()) +
                          (target->transform == Transform::kTranspose ? " (transposed: a Conv1D weight)" : ""));
      }
      it->second.copy_(v);
      filled.insert(target->name);
      ++report.tensors;
    }
  }
  for (const auto& [name, p] : params) {
    if (!filled.count(name)) {
      throw ConfigError("'" + dir + "': no file holds the model's '" + name + "' (strict, as load_state_dict)");
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report;
}

namespace {

// The model's parameters under transformers' names and layouts, in dtype, on the CPU.
NamedTensors hfTensors(LanguageModel& model, torch::ScalarType dtype) {
  const LanguageModelConfig& c = model.config();
  NamedTensors tensors;
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    torch::Tensor v = item.value().detach().to(torch::kCPU, dtype);
    std::string hf;
    if (c.family == LmFamily::kGpt2) {
      hf = name;
      for (const char* conv : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
        if (name.size() > std::string(conv).size() && name.ends_with(conv)) v = v.t();
      }
    } else if (name == "tok_embeddings.weight") {
      hf = "model.embed_tokens.weight";
    } else if (name == "norm.weight") {
      hf = "model.norm.weight";
    } else if (name == "output.weight") {
      hf = "lm_head.weight";
    } else {
      static const std::map<std::string, std::string> kBlock = {
          {"attention_norm.weight", "input_layernorm.weight"},
          {"ffn_norm.weight", "post_attention_layernorm.weight"},
          {"attention.wq.weight", "self_attn.q_proj.weight"},
          {"attention.wk.weight", "self_attn.k_proj.weight"},
          {"attention.wv.weight", "self_attn.v_proj.weight"},
          {"attention.wo.weight", "self_attn.o_proj.weight"},
          {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
          {"feed_forward.w2.weight", "mlp.down_proj.weight"},
          {"feed_forward.w3.weight", "mlp.up_proj.weight"}};
      const size_t dot = name.find('.', 7);
      const std::string rest = name.substr(dot + 1);
      hf = "model.layers." + name.substr(7, dot - 7) + "." + kBlock.at(rest);
      if (rest == "attention.wq.weight") v = toHalves(v, c.heads);
      if (rest == "attention.wk.weight") v = toHalves(v, c.kv_heads);
    }
    tensors.emplace_back(hf, v.contiguous());
  }
  return tensors;
}

// model.safetensors, or files of at most max_shard_bytes (a tensor over it
// alone in one) named model-0000K-of-0000N.safetensors with
// model.safetensors.index.json, as transformers' save_pretrained. Returns
// the files' names.
std::vector<std::string> writeHfWeights(const std::string& dir, const NamedTensors& tensors, uint64_t max_shard_bytes) {
  std::vector<NamedTensors> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().emplace_back(name, t);
    in_shard += bytes;
    total += bytes;
  }
  if (shards.size() == 1) {
    writeSafetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
    return {"model.safetensors"};
  }
  std::vector<std::string> files;
  nlohmann::json weight_map = nlohmann::json::object();
  const auto number = [](size_t n) {
    std::string text = std::to_string(n);
    return std::string(text.size() < 5 ? 5 - text.size() : 0, '0') + text;
  };
  for (size_t k = 0; k < shards.size(); ++k) {
    files.push_back("model-" + number(k + 1) + "-of-" + number(shards.size()) + ".safetensors");
    writeSafetensors(dir + "/" + files.back(), shards[k], {{"format", "pt"}});
    for (const auto& item : shards[k]) weight_map[item.first] = files.back();
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::ofstream out(dir + "/model.safetensors.index.json");
  out << index.dump(2) << "\n";
  if (!out) throw IoError("'" + dir + "/model.safetensors.index.json': cannot be written");
  return files;
}

nlohmann::json hfConfigJson(const LanguageModelConfig& c, torch::ScalarType dtype) {
  nlohmann::json j;
  const char* torch_dtype = dtype == torch::kBFloat16 ? "bfloat16" : dtype == torch::kHalf ? "float16" : "float32";
  if (c.family == LmFamily::kLlama) {
    j = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", c.dim},
         {"intermediate_size", c.ffn_dim}, {"num_hidden_layers", c.layers}, {"num_attention_heads", c.heads},
         {"num_key_value_heads", c.kv_heads}, {"vocab_size", c.vocab_size}, {"max_position_embeddings", c.max_seq_len},
         {"rms_norm_eps", c.norm_eps}, {"rope_theta", c.rope_theta}, {"tie_word_embeddings", c.tie_embeddings},
         {"hidden_act", "silu"}, {"attention_bias", false}, {"mlp_bias", false}, {"head_dim", c.headDim()},
         {"torch_dtype", torch_dtype}, {"rope_scaling", nullptr}};
    // transformers 4's form, which every later version reads too.
    if (c.rope_scaling.enabled()) {
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope_scaling.factor},
                           {"low_freq_factor", c.rope_scaling.low_freq_factor},
                           {"high_freq_factor", c.rope_scaling.high_freq_factor},
                           {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
    }
  } else {
    j = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"n_embd", c.dim}, {"n_inner", c.ffn_dim},
         {"n_layer", c.layers}, {"n_head", c.heads}, {"vocab_size", c.vocab_size}, {"n_positions", c.max_seq_len},
         {"n_ctx", c.max_seq_len}, {"layer_norm_epsilon", c.norm_eps}, {"activation_function", "gelu_new"},
         {"tie_word_embeddings", c.tie_embeddings}, {"torch_dtype", torch_dtype}};
  }
  return j;
}

}  // namespace

std::vector<std::string> exportHf(LanguageModel& model, const std::string& dir, torch::ScalarType dtype,
                                  uint64_t max_shard_bytes) {
  if (max_shard_bytes == 0) throw ConfigError("exportHf: max_shard_bytes 0, expected a size > 0");
  fs::create_directories(dir);
  std::vector<std::string> files = writeHfWeights(dir, hfTensors(model, dtype), max_shard_bytes);
  std::ofstream out(dir + "/config.json");
  out << hfConfigJson(model.config(), dtype).dump(2) << "\n";
  if (!out) throw IoError("'" + dir + "/config.json': cannot be written");
  files.push_back("config.json");
  return files;
}

}  // namespace dtrain::models
