#include "models/llama.h"

#include <cmath>

#include "models/cached_attention.h"

namespace dtrain::models {
namespace {

namespace nn = torch::nn;

nn::Linear projection(int64_t in, int64_t out) { return nn::Linear(nn::LinearOptions(in, out).bias(false)); }

// The stream, its pending update added, and its RMS normalisation.
ops::ResidualAndNormed addRmsNorm(const ResidualStream& in, const torch::Tensor& weight, double eps) {
  if (in.pending.defined()) return ops::addRmsNorm(in.residual, in.pending, weight, eps);
  return {in.residual, ops::rmsNorm(in.residual, weight, eps)};
}

class RmsNorm : public nn::Module {
 public:
  explicit RmsNorm(int64_t dim) : weight(register_parameter("weight", torch::ones({dim}))) {}
  torch::Tensor weight;
};

// The attention and the feed-forward take their sizes from their weights,
// not the config: a tensor-parallel plan leaves each rank a share of the
// heads and hidden units (models/tensor_split.h).
class LlamaAttention : public nn::Module {
 public:
  LlamaAttention(const LanguageModelConfig& c, std::shared_ptr<RotaryCache> rotary,
                 std::shared_ptr<const BlockSeams> seams)
      : head_dim_(c.headDim()),
        rotary_(std::move(rotary)),
        seams_(std::move(seams)),
        wq(register_module("wq", projection(c.dim, c.heads * c.headDim()))),
        wk(register_module("wk", projection(c.dim, c.kvDim()))),
        wv(register_module("wv", projection(c.dim, c.kvDim()))),
        wo(register_module("wo", projection(c.heads * c.headDim(), c.dim))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    TensorSplit* split = seams_->split;
    const std::vector<torch::Tensor> products =
        split != nullptr ? split->columnLinears(x, {wq->weight, wk->weight, wv->weight}, {})
                         : blockLinears(*seams_, x, {wq->weight, wk->weight, wv->weight});
    const ops::PackedDocuments& documents = seams_->documents;
    if (documents.defined()) {  // packed samples: positions and attention within each
      const std::vector<torch::Tensor> qkv = byHead(products, rotary_->tableFor(x), documents.positions);
      return output(ops::documentAttention(qkv[0], qkv[1], qkv[2], documents), products[0]);
    }
    const std::vector<torch::Tensor> qkv = byHead(products, rotary_->tableFor(x));
    return output(ops::causalAttention(qkv[0], qkv[1], qkv[2]), products[0]);
  }

  // forward for new positions slot.offset().., earlier keys and values from
  // the slot: the rotary table's rows from the offset on.
  torch::Tensor forwardCached(const torch::Tensor& x, KvSlot& slot) {
    const ops::RotaryTable& table = rotary_->tableFor(x);
    const int64_t seq = x.size(1);
    const ops::RotaryTable rows{table.cos.narrow(0, slot.offset(), seq), table.sin.narrow(0, slot.offset(), seq)};
    const std::vector<torch::Tensor> qkv = byHead(
        {blockLinear(*seams_, x, wq->weight, {}), blockLinear(*seams_, x, wk->weight, {}),
         blockLinear(*seams_, x, wv->weight, {})},
        rows);
    const auto [keys, values] = slot.append(qkv[1], qkv[2]);
    return output(ops::cachedAttention(qkv[0], keys, values, slot.offset()), x);
  }

 private:
  // q, k (rotated by the table's first rows, or by the rows of `positions`
  // [B, T] when given) and v from the products of wq, wk, wv [B, T, ·],
  // each [B, heads or kv_heads, T, head_dim] (those whose rows wq, wk, wv hold).
  std::vector<torch::Tensor> byHead(const std::vector<torch::Tensor>& products, const ops::RotaryTable& table,
                                    const torch::Tensor& positions = {}) {
    const int64_t batch = products[0].size(0), seq = products[0].size(1);
    const int64_t heads = wq->weight.size(0) / head_dim_, kv_heads = wk->weight.size(0) / head_dim_;
    const auto rotate = [&](const torch::Tensor& t) {
      return positions.defined() ? ops::applyRotaryAt(t, table, positions) : ops::applyRotary(t, table);
    };
    const torch::Tensor q = rotate(products[0].view({batch, seq, heads, head_dim_}));
    const torch::Tensor k = rotate(products[1].view({batch, seq, kv_heads, head_dim_}));
    const torch::Tensor v = products[2].view({batch, seq, kv_heads, head_dim_});
    return {q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)};
  }
  // The heads' outputs y [B, heads, T, head_dim] back to [B, T, heads x head_dim], projected.
  torch::Tensor output(const torch::Tensor& y, const torch::Tensor& x) {
    const torch::Tensor flat = y.transpose(1, 2).reshape({x.size(0), x.size(1), y.size(1) * y.size(3)});
    return rowSplitLinear(*seams_, flat, wo->weight, torch::Tensor());
  }

  int64_t head_dim_;
  std::shared_ptr<RotaryCache> rotary_;
  std::shared_ptr<const BlockSeams> seams_;

 public:
  nn::Linear wq, wk, wv, wo;
};

class LlamaFeedForward : public nn::Module {
 public:
  LlamaFeedForward(const LanguageModelConfig& c, std::shared_ptr<const BlockSeams> seams)
      : seams_(std::move(seams)),
        w1(register_module("w1", projection(c.dim, c.ffn_dim))),
        w2(register_module("w2", projection(c.ffn_dim, c.dim))),
        w3(register_module("w3", projection(c.dim, c.ffn_dim))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    TensorSplit* split = seams_->split;
    const std::vector<torch::Tensor> products =
        split != nullptr ? split->columnLinears(x, {w1->weight, w3->weight}, {})
                         : blockLinears(*seams_, x, {w1->weight, w3->weight});
    return rowSplitLinear(*seams_, ops::swiglu(products[0], products[1]), w2->weight, torch::Tensor());
  }

 private:
  std::shared_ptr<const BlockSeams> seams_;

 public:
  nn::Linear w1, w2, w3;
};

class LlamaBlock : public TransformerBlock {
 public:
  LlamaBlock(const LanguageModelConfig& c, std::shared_ptr<RotaryCache> rotary,
             const std::shared_ptr<const BlockSeams>& seams)
      : eps_(c.norm_eps),
        attention_norm(register_module("attention_norm", std::make_shared<RmsNorm>(c.dim))),
        attention(register_module("attention", std::make_shared<LlamaAttention>(c, std::move(rotary), seams))),
        ffn_norm(register_module("ffn_norm", std::make_shared<RmsNorm>(c.dim))),
        feed_forward(register_module("feed_forward", std::make_shared<LlamaFeedForward>(c, seams))) {}

  ResidualStream forwardStream(const ResidualStream& in) override {
    return around(in, [&](const torch::Tensor& normed) { return attention->forward(normed); });
  }

  torch::Tensor forwardCached(const torch::Tensor& x, KvSlot slot) override {
    return around(ResidualStream{x, {}},
                  [&](const torch::Tensor& normed) { return attention->forwardCached(normed, slot); })
        .value();
  }

 private:
  // The block around its attention `attend` (of the normed stream); the
  // feed-forward's output is left pending.
  template <typename Attend>
  ResidualStream around(const ResidualStream& in, Attend attend) {
    const ops::ResidualAndNormed first = addRmsNorm(in, attention_norm->weight, eps_);
    const torch::Tensor attended = attend(first.normed);
    const ops::ResidualAndNormed mid = ops::addRmsNorm(first.residual, attended, ffn_norm->weight, eps_);
    return {mid.residual, feed_forward->forward(mid.normed)};
  }

  double eps_;

 public:
  std::shared_ptr<RmsNorm> attention_norm;
  std::shared_ptr<LlamaAttention> attention;
  std::shared_ptr<RmsNorm> ffn_norm;
  std::shared_ptr<LlamaFeedForward> feed_forward;
};

}  // namespace

RotaryCache::RotaryCache(int64_t max_seq_len, int64_t head_dim, double theta, const RopeScaling& scaling)
    : max_seq_len_(max_seq_len), head_dim_(head_dim), theta_(theta), scaling_(scaling) {}

const ops::RotaryTable& RotaryCache::tableFor(const torch::Tensor& x) {
  const torch::ScalarType dtype = x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  if (!table_.cos.defined() || table_.cos.device() != x.device() || table_.cos.scalar_type() != dtype) {
    table_ = ops::rotaryTable(max_seq_len_, head_dim_, theta_, x.device(), dtype, scaling_);
  }
  return table_;
}

Llama::Llama(const LanguageModelConfig& c) : LanguageModel(c) {
  tok_embeddings_ = register_module("tok_embeddings", nn::Embedding(c.vocab_size, c.dim));
  auto rotary = std::make_shared<RotaryCache>(c.max_seq_len, c.headDim(), c.rope_theta, c.rope_scaling);
  auto layers = register_module("layers", nn::ModuleList());
  for (int64_t i = 0; i < c.layers; ++i) {
    auto block = std::make_shared<LlamaBlock>(c, rotary, seams());
    layers->push_back(block);
    addBlock(block);
  }
  norm_weight_ = register_module("norm", std::make_shared<RmsNorm>(c.dim))->weight;
  if (!c.tie_embeddings) output_ = register_module("output", projection(c.dim, c.vocab_size));
  initWeights();
}

void Llama::initWeights() {
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config().layers));
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    if (name.ends_with("norm.weight")) {
      p.fill_(1.0);
    } else {
      const bool residual = name.ends_with("attention.wo.weight") || name.ends_with("feed_forward.w2.weight");
      p.normal_(0.0, residual ? residual_std : 0.02);
    }
  }
}

torch::Tensor Llama::embed(const torch::Tensor& tokens) {
  if (TensorSplit* split = tensorSplit()) return split->tokenEmbedding(tokens, tok_embeddings_->weight);
  return tok_embeddings_->forward(tokens);
}

// Rotary positions enter in the attention, not here.
torch::Tensor Llama::embedAt(const torch::Tensor& tokens, int64_t) { return embed(tokens); }

torch::Tensor Llama::finalNorm(const torch::Tensor& x) { return ops::rmsNorm(x, norm_weight_, config().norm_eps); }

torch::Tensor Llama::finalNormOf(const ResidualStream& stream) {
  return addRmsNorm(stream, norm_weight_, config().norm_eps).normed;
}

torch::Tensor Llama::outputWeight() { return output_ ? output_->weight : tok_embeddings_->weight; }

std::vector<torch::Tensor> Llama::embeddingParameters() { return {tok_embeddings_->weight}; }

std::optional<LoraSite> Llama::loraSite(int64_t block, LoraTarget target) {
  auto& b = static_cast<LlamaBlock&>(*blocks().at(static_cast<size_t>(block)));
  const auto whole = [](torch::nn::Linear& layer) {
    return LoraSite{layer.get(), layer->weight, 0, layer->weight.size(0), ""};
  };
  switch (target) {
    case LoraTarget::kQ: return whole(b.attention->wq);
    case LoraTarget::kK: return whole(b.attention->wk);
    case LoraTarget::kV: return whole(b.attention->wv);
    case LoraTarget::kO: return whole(b.attention->wo);
    case LoraTarget::kGate: return whole(b.feed_forward->w1);
    case LoraTarget::kUp: return whole(b.feed_forward->w3);
    case LoraTarget::kDown: return whole(b.feed_forward->w2);
  }
  return std::nullopt;
}

std::vector<torch::Tensor> Llama::headParameters() {
  std::vector<torch::Tensor> head = {norm_weight_};
  if (output_) head.push_back(output_->weight);
  return head;
}

}  // namespace dtrain::models
