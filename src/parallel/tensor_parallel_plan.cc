#include "parallel/tensor_parallel_plan.h"

#include <utility>

#include "common/error.h"
#include "parallel/parallel_plan.h"

namespace dtrain {
namespace {

using Kind = ParameterSplit::Kind;

// The edges of the regions (models/tensor_split.h), Megatron's way.
class MegatronSplit : public models::TensorSplit {
 public:
  MegatronSplit(std::shared_ptr<TensorParallelGroup> group, const TensorParallelOptions& options)
      : group_(std::move(group)),
        sequence_parallel_(options.sequence_parallel),
        overlap_(options.sequence_parallel && options.overlap_chunks > 0 && group_->size() > 1),
        chunks_(options.overlap_chunks) {}

  std::vector<torch::Tensor> columnLinears(const torch::Tensor& normed, const std::vector<torch::Tensor>& weights,
                                           const std::vector<torch::Tensor>& biases) override {
    if (!overlap_) return TensorSplit::columnLinears(normed, weights, biases);
    const torch::ScalarType type = models::ops::matmulType(normed);
    return tp::sequenceParallelColumnLinears(normed.to(type), castAll(weights, type), castAll(biases, type), *group_,
                                             chunks_);
  }
  torch::Tensor rowLinear(const torch::Tensor& x, const torch::Tensor& weight) override {
    if (!overlap_) return TensorSplit::rowLinear(x, weight);
    const torch::ScalarType type = models::ops::matmulType(x);
    return tp::sequenceParallelRowLinear(x.to(type), weight.to(type), *group_, chunks_);
  }

  torch::Tensor columnInput(const torch::Tensor& normed) override {
    return sequence_parallel_ ? tp::gatherSequence(normed, *group_, 1) : tp::copyToRegion(normed, *group_);
  }
  torch::Tensor rowOutput(const torch::Tensor& partial) override {
    return sequence_parallel_ ? tp::reduceScatterSequence(partial, *group_, 1) : tp::reduceFromRegion(partial, *group_);
  }
  torch::Tensor tokenEmbedding(const torch::Tensor& tokens, const torch::Tensor& table_shard) override {
    return rowOutput(tp::vocabShardEmbedding(tokens, table_shard, group_->rank() * table_shard.size(0)));
  }
  torch::Tensor sequencePart(const torch::Tensor& x, int64_t dim) override {
    return sequence_parallel_ ? tp::splitSequence(x, *group_, dim) : x;
  }
  torch::Tensor classifierCrossEntropy(const torch::Tensor& normed, const torch::Tensor& weight_shard,
                                       const torch::Tensor& targets) override {
    // Chunked over the rows, so that a long sequence's logits never all exist.
    const torch::Tensor hidden = columnInput(normed);
    return tp::vocabParallelClassifierCrossEntropy(hidden.reshape({-1, hidden.size(-1)}), weight_shard,
                                                   targets.reshape({-1}), group_->rank() * weight_shard.size(0),
                                                   *group_)
        .mean();
  }
  torch::Tensor classifier(const torch::Tensor& normed, const torch::Tensor& weight_shard) override {
    return tp::gatherParts(models::ops::classifier(columnInput(normed), weight_shard), *group_, -1);
  }

 private:
  static std::vector<torch::Tensor> castAll(const std::vector<torch::Tensor>& tensors, torch::ScalarType type) {
    std::vector<torch::Tensor> cast;
    for (const torch::Tensor& t : tensors) cast.push_back(t.defined() ? t.to(type) : t);
    return cast;
  }

  std::shared_ptr<TensorParallelGroup> group_;
  bool sequence_parallel_;
  bool overlap_;     // the products at the region's edges overlap their communication
  int64_t chunks_;
};

PlannedModel plannedModel(const models::LanguageModelConfig& c) {
  return plannedLanguageModel(c.name, c.heads, c.kv_heads, c.ffn_dim, c.vocab_size, c.seq_len);
}

// How the parameter `name` of a model of `c` splits over tp ranks.
ParameterSplit splitOf(const std::string& name, const models::LanguageModelConfig& c, int tp) {
  ParameterSplit split;
  const auto any = [&](std::initializer_list<const char*> suffixes) {
    for (const char* suffix : suffixes) {
      if (name.ends_with(suffix)) return true;
    }
    return false;
  };
  if (any({"attn.c_attn.weight", "attn.c_attn.bias"})) {
    split.kind = Kind::kRows;
    split.blocks = 3;
  } else if (any({"mlp.c_fc.weight", "mlp.c_fc.bias", "attention.wq.weight", "feed_forward.w1.weight",
                  "feed_forward.w3.weight", "wte.weight", "lm_head.weight", "tok_embeddings.weight"}) ||
             name == "output.weight") {
    split.kind = Kind::kRows;
  } else if (any({"attention.wk.weight", "attention.wv.weight"})) {
    split.kind = c.kv_heads >= tp ? Kind::kRows : Kind::kKvHeadRows;
    split.head_rows = c.headDim();
  } else if (any({"attn.c_proj.weight", "mlp.c_proj.weight", "attention.wo.weight", "feed_forward.w2.weight"})) {
    split.kind = Kind::kColumns;
  }
  return split;  // whole: norms, wpe, the row-split products' biases
}

// Whether a whole parameter's gradient is computed in part on each rank:
// the norms and the biases added after rowOutput run on sequence shards.
bool partialWhenSequenceParallel(const std::string& name) {
  return name.find("ln_") != std::string::npos || name.ends_with("norm.weight") || name.ends_with("c_proj.bias");
}

// The key/value head whose rows rank `rank` holds when there are fewer of them than tp ranks.
int64_t kvHeadOf(int rank, int tp, int64_t kv_heads) { return rank * kv_heads / tp; }

}  // namespace

torch::Tensor partOf(const torch::Tensor& whole, const ParameterSplit& split, int rank, int tp) {
  switch (split.kind) {
    case Kind::kWhole: return whole.clone();
    case Kind::kRows: {
      std::vector<torch::Tensor> parts;
      for (const torch::Tensor& block : whole.chunk(split.blocks, 0)) parts.push_back(block.chunk(tp, 0)[rank]);
      return torch::cat(parts, 0).contiguous();
    }
    case Kind::kColumns: return whole.chunk(tp, 1)[rank].contiguous();
    case Kind::kKvHeadRows: {
      const int64_t heads = whole.size(0) / split.head_rows;
      return whole.narrow(0, kvHeadOf(rank, tp, heads) * split.head_rows, split.head_rows).contiguous();
    }
  }
  return whole.clone();
}

std::vector<std::pair<int64_t, int64_t>> wholeRunsOf(const ParameterSplit& split, int rank, int tp, int64_t begin,
                                                     int64_t count) {
  int64_t whole_numel = 1;
  for (int64_t d : split.whole) whole_numel *= d;
  switch (split.kind) {
    case Kind::kWhole: return {{begin, count}};
    case Kind::kColumns: return {{rank * (whole_numel / tp) + begin, count}};
    case Kind::kKvHeadRows: {
      const int64_t head_numel = split.head_rows * (whole_numel / split.whole.at(0));
      const int64_t heads = split.whole.at(0) / split.head_rows;
      return {{kvHeadOf(rank, tp, heads) * head_numel + begin, count}};
    }
    case Kind::kRows: break;
  }
  const int64_t block = whole_numel / split.blocks, part_block = block / tp;
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t at = begin, end = begin + count; at < end;) {
    const int64_t b = at / part_block, within = at % part_block;
    const int64_t n = std::min(end - at, part_block - within);
    runs.emplace_back(b * block + rank * part_block + within, n);
    at += n;
  }
  return runs;
}

bool writesPart(const ParameterSplit& split, int rank, int tp) {
  if (split.kind == Kind::kWhole) return rank == 0;
  if (split.kind == Kind::kKvHeadRows) {
    const int64_t heads = split.whole.at(0) / split.head_rows;
    return rank == 0 || kvHeadOf(rank, tp, heads) != kvHeadOf(rank - 1, tp, heads);
  }
  return true;
}

torch::Tensor wholeOf(const std::vector<torch::Tensor>& parts, const ParameterSplit& split, int tp) {
  switch (split.kind) {
    case Kind::kWhole: return parts.at(0).clone();
    case Kind::kRows: {
      std::vector<torch::Tensor> blocks;
      for (int64_t b = 0; b < split.blocks; ++b) {
        for (int r = 0; r < tp; ++r) blocks.push_back(parts.at(static_cast<size_t>(r)).chunk(split.blocks, 0)[b]);
      }
      return torch::cat(blocks, 0);
    }
    case Kind::kColumns: return torch::cat(parts, 1);
    case Kind::kKvHeadRows: {
      const int64_t heads = split.whole.at(0) / split.head_rows;
      std::vector<torch::Tensor> rows;
      for (int64_t h = 0; h < heads; ++h) rows.push_back(parts.at(static_cast<size_t>(h * tp / heads)));
      return torch::cat(rows, 0);
    }
  }
  return parts.at(0).clone();
}

TensorParallelModel::TensorParallelModel(std::shared_ptr<models::LanguageModel> model,
                                         std::shared_ptr<TensorParallelGroup> group, TensorParallelOptions options)
    : model_(std::move(model)), group_(std::move(group)), options_(options) {
  if (!model_ || !group_) throw ConfigError("tensor parallelism: no language model or no tensor-parallel group");
  const models::LanguageModelConfig& c = model_->config();
  const int tp = group_->size(), rank = group_->rank();
  ParallelOptions check;
  check.tp = tp;
  check.sequence_parallel = options_.sequence_parallel;
  checkParallelOptions(check, plannedModel(c));
  if (tp == 1) options_.sequence_parallel = false;

  torch::NoGradGuard no_grad;
  for (auto& item : model_->named_parameters()) {
    ParameterSplit split = splitOf(item.key(), c, tp);
    torch::Tensor& p = item.value();
    split.whole = p.sizes().vec();
    if (split.kind == Kind::kColumns) {
      // Column-major, so that rank r's part is one run of the whole
      // weight's column-major order (what a checkpoint writes it in).
      p.set_data(partOf(p.detach(), split, rank, tp).t().contiguous().t());
    } else if (split.kind != Kind::kWhole) {
      p.set_data(partOf(p.detach(), split, rank, tp));
    }
    std::shared_ptr<TensorParallelGroup> g = group_;
    if (split.kind == Kind::kKvHeadRows && tp > 1) {
      // Ranks that share a key/value head each hold a part of its gradient.
      const int64_t head = kvHeadOf(rank, tp, c.kv_heads), rows = split.head_rows;
      const std::vector<int64_t> whole = split.whole;
      p.register_hook([g, head, rows, whole](const torch::Tensor& grad) {
        torch::Tensor all = torch::zeros(whole, grad.options());
        all.narrow(0, head * rows, rows).copy_(grad);
        g->allReduce(all);
        return all.narrow(0, head * rows, rows).contiguous();
      });
    } else if (split.kind == Kind::kWhole && options_.sequence_parallel && partialWhenSequenceParallel(item.key())) {
      p.register_hook([g](const torch::Tensor& grad) {
        torch::Tensor sum = grad.contiguous().clone();
        g->allReduce(sum);
        return sum;
      });
    }
    layout_[item.key()] = std::move(split);
  }
  split_ = std::make_unique<MegatronSplit>(group_, options_);
  model_->setTensorSplit(split_.get());
}

TensorParallelModel::~TensorParallelModel() {
  if (model_ && model_->tensorSplit() == split_.get()) model_->setTensorSplit(nullptr);
}

}  // namespace dtrain
