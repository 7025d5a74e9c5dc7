#include "models/hf_checkpoint.h"

#include <algorithm>
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

// How a file's tensor becomes one of dtrain's parameters (outside the
// anonymous namespace: HfWeights::Impl keeps one per parameter).
enum class Transform { kNone, kTranspose, kRotaryHeads, kRotaryKvHeads };

namespace {

namespace fs = std::filesystem;

std::string shapeOf(c10::IntArrayRef sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + "]";
}

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

struct HfWeights::Impl {
  // Where one of dtrain's parameters comes from.
  struct Source {
    std::string file, hf;
    torch::Tensor data;  // the file's tensor: a view of the mapping
    Transform transform = Transform::kNone;
    int64_t heads = 0;   // kRotary*: the heads whose halves are put back into pairs
    std::vector<int64_t> shape;  // dtrain's (whole)
    bool read = false;
  };
  std::map<std::string, Source> sources;
  int files = 0;
  int64_t tensors = 0, tensors_read = 0, bytes_read = 0, data_bytes = 0;

  // The whole parameter in dtrain's layout (a copy where the transform needs one).
  static torch::Tensor logical(const Source& s) {
    switch (s.transform) {
      case Transform::kTranspose: return s.data.t();
      case Transform::kRotaryHeads:
      case Transform::kRotaryKvHeads: return fromHalves(s.data, s.heads);
      case Transform::kNone: break;
    }
    return s.data;
  }
};

HfWeights::HfWeights(const std::string& dir, const LanguageModelConfig& c,
                     const std::map<std::string, std::vector<int64_t>>& shapes)
    : impl_(std::make_unique<Impl>()) {
  for (const std::string& file : hfWeightFiles(dir)) {
    ++impl_->files;
    for (auto& [hf, value] : mapSafetensors(file).tensors) {
      if (ignored(hf)) continue;
      const std::optional<Target> target = targetOf(c.family, hf);
      auto it = target ? shapes.find(target->name) : shapes.end();
      if (it == shapes.end()) {
        // A tied head may be saved beside the embedding it is.
        if (c.tie_embeddings && (hf == "lm_head.weight")) continue;
        throw ConfigError(file + ": tensor '" + hf + "' is no parameter of a " + lmFamilyName(c.family) +
                          " model of this config");
      }
      std::vector<int64_t> shape = value.sizes().vec();
      if (target->transform == Transform::kTranspose) std::reverse(shape.begin(), shape.end());
      if (shape != it->second) {
        throw ConfigError(file + ": tensor '" + hf + "' has shape " + shapeOf(value.sizes()) + "; the model's '" +
                          target->name + "' needs " + shapeOf(it->second) +
                          (target->transform == Transform::kTranspose ? " (transposed: a Conv1D weight)" : ""));
      }
      Impl::Source& source = impl_->sources[target->name];
      if (source.data.defined()) {  // a later file's copy replaces it, as a second load would
        impl_->data_bytes -= source.data.numel() * static_cast<int64_t>(source.data.element_size());
        --impl_->tensors;
      }
      const int64_t heads = target->transform == Transform::kRotaryHeads ? c.heads : c.kv_heads;
      source = {file, hf, value, target->transform, heads, it->second, false};
      impl_->data_bytes += value.numel() * static_cast<int64_t>(value.element_size());
      ++impl_->tensors;
    }
  }
  for (const auto& [name, shape] : shapes) {
    if (!impl_->sources.count(name)) {
      throw ConfigError("'" + dir + "': no file holds the model's '" + name + "' (strict, as load_state_dict)");
    }
  }
}

HfWeights::~HfWeights() = default;

void HfWeights::read(const std::string& name, const std::vector<int64_t>& storage_order, int64_t begin,
                     const torch::Tensor& dst) {
  auto it = impl_->sources.find(name);
  if (it == impl_->sources.end()) throw ConfigError("HfWeights: no file holds the model's '" + name + "'");
  Impl::Source& s = it->second;
  const int64_t count = dst.numel();
  const int64_t element = static_cast<int64_t>(s.data.element_size());
  const bool row_major = storage_order.empty();
  const bool column_major = s.shape.size() == 2 && storage_order == std::vector<int64_t>{1, 0};
  torch::NoGradGuard no_grad;
  // The rows of the parameter (in storage order) that hold the elements:
  // a view of the file's bytes when they lie there in that order (only the
  // elements asked for are read), else a copy (all of it was read).
  torch::Tensor rows;
  int64_t first = 0;  // the element rows[0] starts at
  int64_t copied = -1;  // file elements a copy read
  if (s.shape.size() == 1) {
    rows = s.data.narrow(0, begin, count);
    first = begin;
  } else if (s.shape.size() == 2 && (row_major || column_major)) {
    const int64_t width = column_major ? s.shape[0] : s.shape[1];
    const int64_t r0 = begin / width, r1 = (begin + count + width - 1) / width, n = r1 - r0;
    first = r0 * width;
    if (s.transform == Transform::kRotaryHeads || s.transform == Transform::kRotaryKvHeads) {
      if (row_major) {  // the rows, each from its place in transformers' halves
        const int64_t all = s.data.size(0);
        const torch::Tensor order = fromHalves(torch::arange(all).view({all, 1}), s.heads).view({-1});
        rows = s.data.index_select(0, order.narrow(0, r0, n));
        copied = rows.numel();
      } else {
        rows = Impl::logical(s).t().narrow(0, r0, n).contiguous();
        copied = s.data.numel();
      }
    } else if ((s.transform == Transform::kTranspose) == column_major) {  // the file's rows are its rows
      rows = s.data.narrow(0, r0, n);
    } else {  // a band of the file's columns
      rows = s.data.narrow(1, r0, n).t().contiguous();
      copied = rows.numel();
    }
  } else {
    torch::Tensor whole = Impl::logical(s);
    if (!row_major) whole = whole.permute(storage_order);
    rows = whole.contiguous().view({-1});
    copied = s.data.numel();
  }
  impl_->bytes_read += (copied >= 0 ? copied : count) * element;
  if (!s.read) {
    s.read = true;
    ++impl_->tensors_read;
  }
  dst.copy_(rows.reshape({-1}).narrow(0, begin - first, count));
}

int HfWeights::files() const { return impl_->files; }
int64_t HfWeights::tensors() const { return impl_->tensors; }
int64_t HfWeights::tensorsRead() const { return impl_->tensors_read; }
int64_t HfWeights::bytesRead() const { return impl_->bytes_read; }
int64_t HfWeights::dataBytes() const { return impl_->data_bytes; }

HfLoadReport loadHfWeights(LanguageModel& model, const std::string& dir) {
  const auto started = std::chrono::steady_clock::now();
  std::map<std::string, torch::Tensor> params;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    params[item.key()] = item.value();
    shapes[item.key()] = item.value().sizes().vec();
  }
  HfWeights weights(dir, model.config(), shapes);
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : params) {
    torch::Tensor flat = p.is_contiguous() ? p.view({-1}) : torch::empty({p.numel()}, p.options());
    weights.read(name, {}, 0, flat);
    if (!p.is_contiguous()) p.copy_(flat.view(p.sizes()));
  }
  HfLoadReport report;
  report.tensors = weights.tensors();
  report.bytes = weights.bytesRead();
  report.files = weights.files();
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
