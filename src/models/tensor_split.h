// Where a transformer language model's forward crosses the edges of tensor
// parallelism (Megatron-LM's layout), for a plan that splits the unchanged
// model's weights (parallel/tensor_parallel_plan.h): the models call these
// at those edges when a split is set (LanguageModel::setTensorSplit), and
// run exactly as before when none is.
//
// What the plan splits and what the model then computes on each rank:
// - column-split products (gpt2's c_attn and c_fc, llama's wq, wk, wv, w1,
//   w3): their output rows, so each rank computes its heads (its share of
//   the MLP's hidden units) from columnInput(normed stream);
// - row-split products (c_proj, wo, w2): their input columns, so each rank's
//   product is a partial sum that rowOutput completes; their biases are
//   added after it, once;
// - the token embedding (and a tied or untied output head) by vocabulary
//   rows: tokenEmbedding completes a lookup as rowOutput does, and the loss
//   never gathers the logits (classifierCrossEntropy);
// - norms, position embeddings and biases after rowOutput stay whole.
//
// The stream between blocks is, on each rank, either the whole [B, T, dim]
// (replicated) or, with sequence parallelism, this rank's T/tp positions
// [B, T/tp, dim]; the norms run on whatever the rank holds.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "models/transformer_ops.h"

namespace dtrain::models {

class TensorSplit {
 public:
  virtual ~TensorSplit() = default;
  // The normed stream as the column-split products take it: the whole
  // sequence (gathered from the shards with sequence parallelism).
  virtual torch::Tensor columnInput(const torch::Tensor& normed) = 0;
  // A row-split product's partial sums, summed over the group (and, with
  // sequence parallelism, left on this rank's shard of the sequence).
  virtual torch::Tensor rowOutput(const torch::Tensor& partial) = 0;
  // The column-split products of the normed stream, one per weight (up to
  // three): linear(columnInput(normed), weights[i], biases[i]) (no bias
  // where biases is shorter or one is undefined), each over the whole
  // sequence. A plan may overlap the communication with the products.
  virtual std::vector<torch::Tensor> columnLinears(const torch::Tensor& normed, const std::vector<torch::Tensor>& weights,
                                                   const std::vector<torch::Tensor>& biases) {
    const torch::Tensor in = columnInput(normed);
    std::vector<torch::Tensor> outputs;
    for (size_t i = 0; i < weights.size(); ++i) {
      outputs.push_back(ops::linear(in, weights[i], i < biases.size() ? biases[i] : torch::Tensor()));
    }
    return outputs;
  }
  // A row-split product completed: rowOutput(linear(x, weight)).
  virtual torch::Tensor rowLinear(const torch::Tensor& x, const torch::Tensor& weight) {
    return rowOutput(ops::linear(x, weight, torch::Tensor()));
  }
  // The rows of `tokens` [B, T] in the vocab-split table (this rank's rows
  // of it), completed as rowOutput does.
  virtual torch::Tensor tokenEmbedding(const torch::Tensor& tokens, const torch::Tensor& table_shard) = 0;
  // This rank's part of a whole-sequence activation [B, T, dim] or [T, dim]
  // (sequence dimension `dim`): its shard with sequence parallelism, all
  // of it without.
  virtual torch::Tensor sequencePart(const torch::Tensor& x, int64_t dim) = 0;
  // Mean cross-entropy over every position of the final normed stream
  // (as the rank holds it) through the vocab-split head weight, against
  // the whole batch's targets [B, T], in float32.
  virtual torch::Tensor classifierCrossEntropy(const torch::Tensor& normed, const torch::Tensor& weight_shard,
                                               const torch::Tensor& targets) = 0;
  // The whole logits [B, T, vocab] of the final normed stream.
  virtual torch::Tensor classifier(const torch::Tensor& normed, const torch::Tensor& weight_shard) = 0;
};

}  // namespace dtrain::models
