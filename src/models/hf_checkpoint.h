// Hugging Face model directories in: config.json and the weights
// (model.safetensors, or shards listed by model.safetensors.index.json) of
// LlamaForCausalLM and GPT2LMHeadModel, as transformers' save_pretrained
// writes them.
//
//   LanguageModelConfig c = readHfConfig(dir);           // the architecture
//   auto model = createLanguageModel(c);
//   HfLoadReport r = loadHfWeights(*model, dir);         // every parameter
//
//   HfWeights weights(dir, c, shapes);                    // or a range at a time
//   weights.read("layers.0.attention.wq.weight", {}, begin, slice_of_a_shard);
//
// Contract:
// - readHfConfig maps the config's fields (Llama: hidden_size,
//   intermediate_size, num_hidden_layers, num_attention_heads,
//   num_key_value_heads, vocab_size, max_position_embeddings, rms_norm_eps,
//   rope_theta, tie_word_embeddings, rope_scaling of type default or
//   llama3 -- or transformers 5's rope_parameters holding them; GPT-2:
//   n_embd, n_inner, n_layer, n_head, vocab_size, n_positions,
//   layer_norm_epsilon, tie_word_embeddings). What dtrain does not compute
//   the same way is a ConfigError naming the field, its value and what is
//   expected: another architecture, another rope_type, a head_dim other than hidden_size / heads,
//   attention or MLP biases on Llama, an activation other than silu (Llama)
//   or gelu_new (GPT-2).
// - loadHfWeights copies every tensor into the parameter it maps to,
//   converting dtype (bf16, fp16, fp32 files) onto the parameter's device:
//   Llama's q_proj and k_proj rows are put back from transformers' halves
//   layout into the interleaved pairs dtrain's rotary embedding rotates
//   (the inverse of transformers' conversion permute); GPT-2's Conv1D
//   weights ([in, out]) are transposed into linear ones. Strict, as
//   load_state_dict(strict=True): a parameter no file fills, a tensor that
//   maps to none (other than GPT-2's attention-mask buffers and rotary
//   inv_freq), or a shape that differs is a ConfigError naming the file and
//   the tensor. A tied head may be in the files or not.
// - HfWeights maps the files (mapSafetensors) and serves ranges of
//   elements of each of dtrain's parameters (by its name, in its shape and
//   layout, in row-major order or, for a 2-D one, column-major: storage
//   order {1, 0}) into any tensor, reading only the rows of the file's
//   tensor those elements lie in (a transposed or column-major read takes a
//   column band, whose elements lie across the tensor's pages; a q/k
//   projection in column-major order is permuted whole first). The
//   checks are loadHfWeights', against the whole shapes given; bytesRead()
//   counts the file's bytes copied out so far, dataBytes() all of the
//   tensors' bytes in the files. loadHfWeights is it read whole.
// - exportHf writes `dir`/config.json and the weights in `dtype` from a
//   model, the inverse mapping, so that transformers' from_pretrained loads
//   it: model.safetensors, or, for a model over max_shard_bytes, files of
//   at most that many bytes (a larger tensor alone in one) named
//   model-0000K-of-0000N.safetensors with model.safetensors.index.json
//   ({"metadata": {"total_size"}, "weight_map"}), as save_pretrained
//   writes them. Returns the names of the files written.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "models/hf_config.h"
#include "models/language_model.h"

namespace dtrain::models {

struct HfLoadReport {
  int64_t tensors = 0;
  int64_t bytes = 0;   // of the files read
  int files = 0;
  double seconds = 0;
};
HfLoadReport loadHfWeights(LanguageModel& model, const std::string& dir);

class HfWeights {
 public:
  // `shapes`: every parameter of the model (dtrain's names, whole shapes).
  HfWeights(const std::string& dir, const LanguageModelConfig& config,
            const std::map<std::string, std::vector<int64_t>>& shapes);
  ~HfWeights();
  HfWeights(const HfWeights&) = delete;
  HfWeights& operator=(const HfWeights&) = delete;

  // Elements [begin, begin + dst.numel()) of parameter `name` in `storage_order`
  // (empty: row-major) into the 1-D `dst` (any dtype or device).
  void read(const std::string& name, const std::vector<int64_t>& storage_order, int64_t begin,
            const torch::Tensor& dst);
  int files() const;
  int64_t tensors() const;      // the file tensors that fill a parameter
  int64_t tensorsRead() const;  // of those, the ones read from so far
  int64_t bytesRead() const;
  int64_t dataBytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::vector<std::string> exportHf(LanguageModel& model, const std::string& dir, torch::ScalarType dtype = torch::kFloat,
                                  uint64_t max_shard_bytes = uint64_t{5} << 30);

}  // namespace dtrain::models
