#include "models/gpt2.h"

#include <cmath>

#include "models/cached_attention.h"

namespace dtrain::models {
namespace {

namespace nn = torch::nn;

nn::LayerNorm layerNorm(const LanguageModelConfig& c) {
  return nn::LayerNorm(nn::LayerNormOptions({c.dim}).eps(c.norm_eps));
}

// The stream, its pending update added, and its normalisation by `norm`.
ops::ResidualAndNormed addLayerNorm(const ResidualStream& in, const nn::LayerNorm& norm, double eps) {
  if (in.pending.defined()) return ops::addLayerNorm(in.residual, in.pending, norm->weight, norm->bias, eps);
  return {in.residual, ops::layerNorm(in.residual, norm->weight, norm->bias, eps)};
}

// The attention and the MLP take their sizes from their weights, not the
// config: a tensor-parallel plan leaves each rank a share of the heads and
// hidden units (models/tensor_split.h).
class Gpt2Attention : public nn::Module {
 public:
  Gpt2Attention(const LanguageModelConfig& c, std::shared_ptr<const BlockSeams> seams)
      : head_dim_(c.dim / c.heads),
        seams_(std::move(seams)),
        c_attn(register_module("c_attn", nn::Linear(c.dim, 3 * c.dim))),
        c_proj(register_module("c_proj", nn::Linear(c.dim, c.dim))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    TensorSplit* split = seams_->split;
    const torch::Tensor product = split != nullptr ? split->columnLinears(x, {c_attn->weight}, {c_attn->bias})[0]
                                                   : blockLinear(*seams_, x, c_attn->weight, c_attn->bias);
    const std::vector<torch::Tensor> qkv = byHead(product);
    const ops::PackedDocuments& documents = seams_->documents;
    return output(documents.defined() ? ops::documentAttention(qkv[0], qkv[1], qkv[2], documents)
                                      : ops::causalAttention(qkv[0], qkv[1], qkv[2]),
                  product);
  }

  // forward for new positions, earlier keys and values from the slot.
  torch::Tensor forwardCached(const torch::Tensor& x, KvSlot& slot) {
    const std::vector<torch::Tensor> qkv = byHead(blockLinear(*seams_, x, c_attn->weight, c_attn->bias));
    const auto [keys, values] = slot.append(qkv[1], qkv[2]);
    return output(ops::cachedAttention(qkv[0], keys, values, slot.offset()), x);
  }

 private:
  // q, k, v of c_attn's product [B, T, 3 x width], each [B, heads, T,
  // head_dim] (heads: those whose rows c_attn holds).
  std::vector<torch::Tensor> byHead(const torch::Tensor& product) {
    const int64_t batch = product.size(0), seq = product.size(1), width = c_attn->weight.size(0) / 3;
    std::vector<torch::Tensor> qkv = product.split(width, -1);
    for (torch::Tensor& t : qkv) t = t.view({batch, seq, width / head_dim_, head_dim_}).transpose(1, 2);
    return qkv;
  }
  // The heads' outputs y [B, heads, T, head_dim] back to [B, T, heads x head_dim], projected.
  torch::Tensor output(const torch::Tensor& y, const torch::Tensor& x) {
    const torch::Tensor flat = y.transpose(1, 2).reshape({x.size(0), x.size(1), y.size(1) * y.size(3)});
    return rowSplitLinear(*seams_, flat, c_proj->weight, c_proj->bias);
  }

  int64_t head_dim_;
  std::shared_ptr<const BlockSeams> seams_;

 public:
  nn::Linear c_attn;
  nn::Linear c_proj;
};

class Gpt2Mlp : public nn::Module {
 public:
  Gpt2Mlp(const LanguageModelConfig& c, std::shared_ptr<const BlockSeams> seams)
      : seams_(std::move(seams)),
        c_fc(register_module("c_fc", nn::Linear(c.dim, c.ffn_dim))),
        c_proj(register_module("c_proj", nn::Linear(c.ffn_dim, c.dim))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    TensorSplit* split = seams_->split;
    if (split == nullptr) {
      const LoraAdapters& lora = seams_->lora;
      if (!lora.adapts(c_fc->weight) && !lora.adapts(c_proj->weight)) {
        return ops::geluMlp(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias);
      }
      // The adapters' products join the layers' own before the GELU and after it.
      const torch::Tensor hidden = lora.adapts(c_fc->weight)
                                       ? torch::gelu(blockLinear(*seams_, x, c_fc->weight, c_fc->bias), "tanh")
                                       : ops::linearGelu(x, c_fc->weight, c_fc->bias);
      return blockLinear(*seams_, hidden, c_proj->weight, c_proj->bias);
    }
    const torch::Tensor partial = ops::geluMlp(split->columnInput(x), c_fc->weight, c_fc->bias, c_proj->weight, {});
    return split->rowOutput(partial) + c_proj->bias;
  }

 private:
  std::shared_ptr<const BlockSeams> seams_;

 public:
  nn::Linear c_fc;
  nn::Linear c_proj;
};

class Gpt2Block : public TransformerBlock {
 public:
  Gpt2Block(const LanguageModelConfig& c, const std::shared_ptr<const BlockSeams>& seams)
      : eps_(c.norm_eps),
        ln_1(register_module("ln_1", layerNorm(c))),
        attn(register_module("attn", std::make_shared<Gpt2Attention>(c, seams))),
        ln_2(register_module("ln_2", layerNorm(c))),
        mlp(register_module("mlp", std::make_shared<Gpt2Mlp>(c, seams))) {}

  ResidualStream forwardStream(const ResidualStream& in) override {
    return around(in, [&](const torch::Tensor& normed) { return attn->forward(normed); });
  }

  torch::Tensor forwardCached(const torch::Tensor& x, KvSlot slot) override {
    return around(ResidualStream{x, {}}, [&](const torch::Tensor& normed) { return attn->forwardCached(normed, slot); })
        .value();
  }

 private:
  // The block around its attention `attend` (of the normed stream); the
  // MLP's output is left pending.
  template <typename Attend>
  ResidualStream around(const ResidualStream& in, Attend attend) {
    const ops::ResidualAndNormed first = addLayerNorm(in, ln_1, eps_);
    const torch::Tensor attended = attend(first.normed);
    const ops::ResidualAndNormed mid = ops::addLayerNorm(first.residual, attended, ln_2->weight, ln_2->bias, eps_);
    return {mid.residual, mlp->forward(mid.normed)};
  }

  double eps_;

 public:
  nn::LayerNorm ln_1;
  std::shared_ptr<Gpt2Attention> attn;
  nn::LayerNorm ln_2;
  std::shared_ptr<Gpt2Mlp> mlp;
};

}  // namespace

Gpt2::Gpt2(const LanguageModelConfig& c) : LanguageModel(c) {
  transformer_ = register_module("transformer", std::make_shared<nn::Module>());
  wte_ = transformer_->register_module("wte", nn::Embedding(c.vocab_size, c.dim));
  wpe_ = transformer_->register_module("wpe", nn::Embedding(c.max_seq_len, c.dim));
  auto h = transformer_->register_module("h", nn::ModuleList());
  for (int64_t i = 0; i < c.layers; ++i) {
    auto block = std::make_shared<Gpt2Block>(c, seams());
    h->push_back(block);
    addBlock(block);
  }
  ln_f_ = transformer_->register_module("ln_f", layerNorm(c));
  if (!c.tie_embeddings) {
    lm_head_ = register_module("lm_head", nn::Linear(nn::LinearOptions(c.dim, c.vocab_size).bias(false)));
  }
  initWeights();
}

void Gpt2::initWeights() {
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config().layers));
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    if (name.ends_with(".bias")) {
      p.zero_();
    } else if (name.find(".ln_") != std::string::npos) {
      p.fill_(1.0);
    } else {
      p.normal_(0.0, name.ends_with("c_proj.weight") ? residual_std : 0.02);
    }
  }
}

// Packed samples: each token's learned position is its position in its sample.
torch::Tensor Gpt2::embed(const torch::Tensor& tokens) {
  const ops::PackedDocuments& documents = seams()->documents;
  if (documents.defined()) return wte_->forward(tokens) + wpe_->forward(documents.positions);
  return embedAt(tokens, 0);
}

torch::Tensor Gpt2::embedAt(const torch::Tensor& tokens, int64_t first_position) {
  const torch::Tensor positions = torch::arange(first_position, first_position + tokens.size(1), tokens.options());
  if (TensorSplit* split = tensorSplit()) {
    return split->tokenEmbedding(tokens, wte_->weight) + split->sequencePart(wpe_->forward(positions), 0);
  }
  return wte_->forward(tokens) + wpe_->forward(positions);
}

torch::Tensor Gpt2::finalNorm(const torch::Tensor& x) {
  return ops::layerNorm(x, ln_f_->weight, ln_f_->bias, config().norm_eps);
}

torch::Tensor Gpt2::finalNormOf(const ResidualStream& stream) {
  return addLayerNorm(stream, ln_f_, config().norm_eps).normed;
}

torch::Tensor Gpt2::outputWeight() { return lm_head_ ? lm_head_->weight : wte_->weight; }

std::vector<torch::Tensor> Gpt2::embeddingParameters() { return {wte_->weight, wpe_->weight}; }

std::optional<LoraSite> Gpt2::loraSite(int64_t block, LoraTarget target) {
  auto& b = static_cast<Gpt2Block&>(*blocks().at(static_cast<size_t>(block)));
  const auto whole = [](nn::Linear& layer) {
    return LoraSite{layer.get(), layer->weight, 0, layer->weight.size(0), ""};
  };
  // q, k and v: a third of the fused projection's rows each.
  const auto third = [&b](int64_t index, const char* suffix) {
    const torch::Tensor& w = b.attn->c_attn->weight;
    const int64_t width = w.size(0) / 3;
    return LoraSite{b.attn->c_attn.get(), w, index * width, width, suffix};
  };
  switch (target) {
    case LoraTarget::kQ: return third(0, "_q");
    case LoraTarget::kK: return third(1, "_k");
    case LoraTarget::kV: return third(2, "_v");
    case LoraTarget::kO: return whole(b.attn->c_proj);
    case LoraTarget::kUp: return whole(b.mlp->c_fc);
    case LoraTarget::kDown: return whole(b.mlp->c_proj);
    case LoraTarget::kGate: break;  // GPT-2's MLP has no gate
  }
  return std::nullopt;
}

std::vector<torch::Tensor> Gpt2::headParameters() {
  std::vector<torch::Tensor> head = {ln_f_->weight, ln_f_->bias};
  if (lm_head_) head.push_back(lm_head_->weight);
  return head;
}

}  // namespace dtrain::models
