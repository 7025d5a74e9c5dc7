// Tensor parallelism applied to an unchanged gpt2 or llama model, as
// Megatron-LM lays it out (parallel/tensor_parallel.h has the
// communication, models/tensor_split.h the edges the models expose):
//
//   auto group = TensorParallelGroup::create(mesh.communicator("tp"), timeout);
//   TensorParallelModel split(lm, group, {.sequence_parallel = true});
//   lm->loss(tokens, targets).backward();   // every tp rank: the same batch
//
// What each parameter becomes on tp rank r (of tp), by name:
//
//   split        gpt2                                  llama
//   rows         attn.c_attn (q, k, v rows each),      attention.wq, wk, wv (when kv_heads >= tp),
//                mlp.c_fc (weight and bias)            feed_forward.w1, w3
//   columns      attn.c_proj.weight, mlp.c_proj.weight attention.wo, feed_forward.w2
//   vocabulary   transformer.wte, lm_head              tok_embeddings, output
//   kv head      -                                     wk, wv when kv_heads < tp: the rows of key/value
//                                                      head r x kv_heads / tp (shared by tp / kv_heads ranks)
//   whole        norms, c_proj biases, wpe             norms
//
// Contract:
// - The constructor is collective on the group only through later
//   forwards; it replaces each split parameter's data with rank r's part
//   of it (the model's weights must be equal on every rank of the group,
//   as the same seed makes them), sets the model's TensorSplit and, on
//   each parameter whose gradient a rank computes only in part (whole ones
//   under sequence parallelism, shared key/value heads), a gradient hook
//   that sums it over the group before it accumulates, so that every
//   parameter's .grad is what the whole model's would hold for it (its
//   part of it). The destructor unsets the split; the hooks stay with the
//   parameters (they sum over a group that must still exist while they run).
// - ConfigError (naming the numbers) for a model that is not a language
//   model of gpt2 or llama, or whose heads, key/value heads, MLP width,
//   vocabulary or (with sequence parallelism) sequence length the group's
//   size does not split (parallel_plan.h's checkParallelOptions).
// - Every rank of the group feeds the same tokens; with sequence
//   parallelism the stream between blocks is this rank's T / tp positions.
// - parameterLayout() names how each parameter was split, for checkpoints
//   that keep the whole model's names and shapes. A column-split weight's
//   part is laid out column-major (strides {1, rows}): rank r's part is
//   then elements [r x n/tp, (r+1) x n/tp) of the whole weight in
//   column-major order, one run (wholeRunsOf).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "models/language_model.h"
#include "parallel/tensor_parallel.h"

namespace dtrain {

struct TensorParallelOptions {
  bool sequence_parallel = true;
  // With sequence parallelism: the pieces each rank's part of the sequence
  // splits into so that the column- and row-split products overlap their
  // all-gathers and reduce-scatters (tp::sequenceParallelColumnLinears);
  // 0 runs each collective before or after its product, nothing beside it
  // (the default: on 2 H200s over NVLink, NCCL's kernels beside the
  // products slowed them more than they hid; docs/parallelism.md).
  int64_t overlap_chunks = 0;
};

// How a parameter of the whole model lies on the ranks of the group.
struct ParameterSplit {
  enum class Kind {
    kWhole,      // every rank holds all of it
    kRows,       // rank r holds rows r x n/tp .. of each of `blocks` equal row blocks (c_attn: 3)
    kColumns,    // rank r holds columns r x n/tp ..
    kKvHeadRows, // rank r holds the rows of one key/value head: r x kv_heads / tp
  };
  Kind kind = Kind::kWhole;
  int64_t blocks = 1;            // kRows: q, k, v stacked in one weight are 3 blocks
  int64_t head_rows = 0;         // kKvHeadRows: rows per head (head_dim)
  std::vector<int64_t> whole;    // the whole parameter's shape
};

// Rank r's part of the whole `tensor` under `split` (a copy, contiguous).
torch::Tensor partOf(const torch::Tensor& whole, const ParameterSplit& split, int rank, int tp);
// The whole parameter from every rank's part (parts[r] is rank r's).
torch::Tensor wholeOf(const std::vector<torch::Tensor>& parts, const ParameterSplit& split, int tp);

// Where elements [begin, begin + count) of rank r's part (in its memory
// order: row-major, column-major for kColumns) lie in the whole parameter
// (in the same order): (whole begin, count) runs, in part order. kRows of
// several blocks give up to one run per block; the others one run.
std::vector<std::pair<int64_t, int64_t>> wholeRunsOf(const ParameterSplit& split, int rank, int tp, int64_t begin,
                                                     int64_t count);
// Whether rank r writes the split's elements to a checkpoint: the parts
// are its own; of a whole parameter rank 0's copy, of a replicated
// key/value head the copy of the first rank that holds it.
bool writesPart(const ParameterSplit& split, int rank, int tp);

class TensorParallelModel {
 public:
  TensorParallelModel(std::shared_ptr<models::LanguageModel> model, std::shared_ptr<TensorParallelGroup> group,
                      TensorParallelOptions options = {});
  ~TensorParallelModel();
  TensorParallelModel(const TensorParallelModel&) = delete;
  TensorParallelModel& operator=(const TensorParallelModel&) = delete;

  TensorParallelGroup& group() const { return *group_; }
  bool sequenceParallel() const { return options_.sequence_parallel; }
  // By the parameter's name in the whole model (named_parameters()).
  const std::map<std::string, ParameterSplit>& parameterLayout() const { return layout_; }

 private:
  std::shared_ptr<models::LanguageModel> model_;
  std::shared_ptr<TensorParallelGroup> group_;
  TensorParallelOptions options_;
  std::map<std::string, ParameterSplit> layout_;
  std::unique_ptr<models::TensorSplit> split_;
};

}  // namespace dtrain
