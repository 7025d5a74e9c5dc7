// Transformer language models (gpt2 and llama families) behind Model.
//
//   auto config = namedLanguageModel("llama", tiny_overrides);  // lm_config.h
//   std::shared_ptr<LanguageModel> lm = createLanguageModel(config);
//   torch::Tensor logits = lm->forward(tokens);      // int64 [B, T] -> [B, T, vocab]
//   torch::Tensor loss = lm->loss(tokens, targets);  // float32 scalar
//
// The forward is assembled from public pieces so that a sharding wrapper
// (ZeRO-3 gathers one unit at a time) can run it unit by unit:
//   x = embed(tokens); for (block : blocks()) x = block->forward(x);
//   h = finalNorm(x); logits = ops::classifier(h, outputWeight());
// (forward itself hands the blocks a ResidualStream, the same values with
// each block's last residual add done inside the next norm.)
// Sampling feeds each new token once through forwardCached (kv_cache.h),
// the blocks reading earlier positions' keys and values from the cache.
// The units' parameters: embeddingParameters(), each block's parameters(),
// headParameters(). A tied output weight is the token embedding: it is
// listed with the embedding unit alone, and used again by the head.
//
// Parameter names are those PyTorch users know (state dicts load 1:1 into
// bench/peers/lm_models.py, nanoGPT and torchtitan): gpt2 as nanoGPT
// (transformer.wte, transformer.h.<i>.attn.c_attn, lm_head, ...), llama as
// Meta/torchtitan (tok_embeddings, layers.<i>.attention.wq, output, ...).
#pragma once

#include "models/kv_cache.h"
#include "models/lm_config.h"
#include "models/lora.h"
#include "models/model.h"
#include "models/tensor_split.h"
#include "models/transformer_ops.h"

#include <memory>
#include <optional>
#include <vector>

namespace dtrain::models {

// The residual stream between blocks as they hand it on: its value is
// residual + pending, where pending is the previous block's last update
// (its MLP's output) not yet added, or undefined. The next block's first
// norm adds it inside its fused kernel (ops::addLayerNorm / addRmsNorm):
// no pass of its own over the stream forward, and backward needs no
// separate sum of the two gradients that reach the stream.
struct ResidualStream {
  torch::Tensor residual;
  torch::Tensor pending;
  torch::Tensor value() const { return pending.defined() ? residual + pending : residual; }
};

// One transformer block: the residual stream [B, T, dim] in, the same
// shape out. Whatever else it needs (rotary tables) it holds itself.
class TransformerBlock : public torch::nn::Module {
 public:
  // forward(x) = forwardStream({x, {}}).value().
  torch::Tensor forward(const torch::Tensor& x) { return forwardStream(ResidualStream{x, {}}).value(); }
  // The block on a stream whose last update may still be pending; returns
  // the stream with this block's last update pending.
  virtual ResidualStream forwardStream(const ResidualStream& in) = 0;
  // forward for the new positions slot.offset().. of x [B, t, dim], the
  // earlier ones' keys and values read from the slot, this chunk's
  // appended to it. The default throws ConfigError (no cached decoding).
  virtual torch::Tensor forwardCached(const torch::Tensor& x, KvSlot slot);
};

// What a model and its blocks read at every forward besides their
// weights: the tensor split (models/tensor_split.h; null while the model
// is whole) and the low-rank adapters (models/lora.h; none until addLora).
// documents: the packed samples of the forward under way (undefined:
// one sequence per row), set by packedLoss / forwardPacked and kept until
// the next forward, so that activation checkpointing's recomputation in
// backward sees the same.
struct BlockSeams {
  TensorSplit* split = nullptr;
  LoraAdapters lora;
  ops::PackedDocuments documents;
};

// x Wᵀ (+ b) of one of the blocks' linear layers on a whole model:
// ops::linear, plus the weight's adapters' product when it has any.
torch::Tensor blockLinear(const BlockSeams& seams, const torch::Tensor& x, const torch::Tensor& weight,
                          const torch::Tensor& bias);

// x Wᵢᵀ of several of the blocks' linear layers over one input (no biases):
// ops::sharedInputLinears, or blockLinear of each when any has adapters.
std::vector<torch::Tensor> blockLinears(const BlockSeams& seams, const torch::Tensor& x,
                                        const std::vector<torch::Tensor>& weights);

// A row-split product x Wᵀ (+ b): with a split, the partial product
// completed by it and the bias added after; without, blockLinear.
torch::Tensor rowSplitLinear(const BlockSeams& seams, const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias);

class LanguageModel : public Model {
 public:
  const LanguageModelConfig& config() const { return config_; }

  // Logits [B, T, vocab] of int64 tokens [B, T], T <= max_seq_len; under
  // autocast they come out in its dtype.
  torch::Tensor forward(torch::Tensor tokens) override;
  // Logits [B, t, vocab] of the new positions cache.length() ..
  // cache.length() + t - 1 for tokens int64 [B, t], the earlier positions
  // read from the cache, which then holds these too. Equal to forward's
  // logits at those positions of the whole sequence. Inference only (runs
  // without autograd). ConfigError for tokens not int64 [cache.batch(), t]
  // or positions past cache.capacity() or the model's max_seq_len.
  torch::Tensor forwardCached(const torch::Tensor& tokens, KvCache& cache);
  // Mean cross-entropy over all B x T positions of targets (int64, the
  // shape of tokens), computed in float32 whatever the logits' dtype.
  torch::Tensor loss(const torch::Tensor& tokens, const torch::Tensor& targets) override;
  // Packed samples (Model::packedLoss): each token attends only to the
  // earlier tokens of its own sample, and its position (llama's rotary
  // angle, gpt2's learned position) is its position within the sample, as
  // Hugging Face's packed training with position_ids computes it. The mean
  // is over the targets that are not -100. ConfigError for positions not of
  // the tokens' shape, or on a model split over tensor-parallel ranks.
  torch::Tensor packedLoss(const torch::Tensor& tokens, const torch::Tensor& targets,
                           const torch::Tensor& positions) override;
  // forward's logits for packed samples, as packedLoss reads them.
  torch::Tensor forwardPacked(const torch::Tensor& tokens, const torch::Tensor& positions);

  // The forward in pieces, as a pipeline's stages run it:
  //   loss(tokens, targets) = lossOf(forwardBlocks(embedStream(tokens), 0, blocks().size()), targets).
  // embedStream checks the tokens (ConfigError as forward) and embeds them;
  // forwardBlocks runs blocks first .. end - 1 (activation checkpointing
  // and unit hooks as in forward; ConfigError for a range outside the
  // blocks); lossOf is the final norm, the head and the mean cross-entropy.
  ResidualStream embedStream(const torch::Tensor& tokens);
  ResidualStream forwardBlocks(ResidualStream stream, int64_t first, int64_t end);
  torch::Tensor lossOf(const ResidualStream& stream, const torch::Tensor& targets);

  // The pieces of forward, in order.
  virtual torch::Tensor embed(const torch::Tensor& tokens) = 0;  // -> [B, T, dim]
  // embed for tokens at positions first_position.. (cached decoding).
  virtual torch::Tensor embedAt(const torch::Tensor& tokens, int64_t first_position) = 0;
  const std::vector<std::shared_ptr<TransformerBlock>>& blocks() const { return blocks_; }
  virtual torch::Tensor finalNorm(const torch::Tensor& x) = 0;
  // finalNorm(stream.value()), adding a pending update inside the norm.
  virtual torch::Tensor finalNormOf(const ResidualStream& stream) { return finalNorm(stream.value()); }
  virtual torch::Tensor outputWeight() = 0;  // [vocab, dim]

  // The sharding units' parameters besides the blocks'.
  virtual std::vector<torch::Tensor> embeddingParameters() = 0;
  virtual std::vector<torch::Tensor> headParameters() = 0;
  // Unit 0: embeddingParameters() and headParameters(); then each block's.
  std::vector<std::vector<torch::Tensor>> shardingUnits() override;
  // The split of every later forward (nullptr: the whole model); not
  // owned. The plan that sets it has split the weights to match.
  void setTensorSplit(TensorSplit* split) { seams_->split = split; }
  TensorSplit* tensorSplit() const { return seams_->split; }
  // LoRA (models/lora.h): adds an adapter to each layer `config` targets
  // in every block (the family's layers, lora_config.h's table) and
  // freezes every other parameter (requires_grad false), so that only the
  // adapters train. Call it once, on a whole model, after its base
  // weights are loaded. ConfigError for a bad config (validateLora), a
  // model already adapted or split over tensor-parallel ranks.
  void addLora(const LoraConfig& config);
  const LoraAdapters& lora() const { return seams_->lora; }
  // Whether training forwards keep no activations inside the blocks and
  // recompute them in backward (models/activation_checkpoint.h): each
  // block keeps only its input stream. Off by default.
  void setActivationCheckpointing(bool on) { activation_checkpointing_ = on; }
  bool activationCheckpointing() const { return activation_checkpointing_; }

  // lm_counts.h's trainingFlopsPerToken for this model; trainingFlopsPerSample()
  // is config().seq_len times trainingFlopsPerToken(config().seq_len).
  double trainingFlopsPerToken(int64_t seq_len) const;
  // Norm weights, biases and the embedding tables (a tied head with them),
  // as nanoGPT's and llm.c's AdamW groups leave them undecayed.
  std::vector<torch::Tensor> noWeightDecayParameters() override;

 protected:
  explicit LanguageModel(LanguageModelConfig config);
  // Subclasses add their blocks in order while registering them.
  void addBlock(std::shared_ptr<TransformerBlock> block) { blocks_.push_back(std::move(block)); }
  // What the blocks hold to read the split, the adapters and the packed samples.
  std::shared_ptr<const BlockSeams> seams() const { return seams_; }
  // Where the adapter of `target` goes in block `block`; nullopt when the
  // family has no such layer.
  virtual std::optional<LoraSite> loraSite(int64_t block, LoraTarget target) = 0;

 private:
  // finalNorm(blocks(embed(tokens))), after checking the tokens.
  torch::Tensor hidden(const torch::Tensor& tokens);
  // ConfigError unless tokens are int64 [batch, seq].
  void checkTokens(const torch::Tensor& tokens) const;
  // The packed samples of the next forward (undefined positions: none).
  void setDocuments(const torch::Tensor& tokens, const torch::Tensor& positions);
  void checkTargets(const torch::Tensor& tokens, const torch::Tensor& targets) const;

  LanguageModelConfig config_;
  std::vector<std::shared_ptr<TransformerBlock>> blocks_;
  bool activation_checkpointing_ = false;
  std::shared_ptr<BlockSeams> seams_ = std::make_shared<BlockSeams>();
};

// Builds the family's model for a config (validated again here), its
// weights drawn from torch's default generator (seed with torch::manual_seed).
std::shared_ptr<LanguageModel> createLanguageModel(const LanguageModelConfig& config);

}  // namespace dtrain::models
