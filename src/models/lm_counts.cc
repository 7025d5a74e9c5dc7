#include "models/lm_counts.h"

#include <algorithm>

namespace dtrain::models {
namespace {

// One block's parameters.
int64_t blockParameters(const LanguageModelConfig& c) {
  const int64_t d = c.dim, f = c.ffn_dim;
  if (c.family == LmFamily::kGpt2) {
    const int64_t norms = 2 * (2 * d);                  // ln_1, ln_2: gain and bias
    const int64_t attention = (d * 3 * d + 3 * d) + (d * d + d);  // c_attn, c_proj
    const int64_t mlp = (d * f + f) + (f * d + d);      // c_fc, c_proj
    return norms + attention + mlp;
  }
  const int64_t norms = 2 * d;                          // attention_norm, ffn_norm
  const int64_t attention = 2 * d * d + 2 * d * c.kvDim();  // wq, wo; wk, wv
  const int64_t feed_forward = 3 * d * f;               // w1, w2, w3
  return norms + attention + feed_forward;
}

int64_t tokenEmbedding(const LanguageModelConfig& c) { return c.vocab_size * c.dim; }

int64_t positionEmbedding(const LanguageModelConfig& c) {
  return c.family == LmFamily::kGpt2 ? c.max_seq_len * c.dim : 0;
}

}  // namespace

int64_t parameterCount(const LanguageModelConfig& c) {
  const int64_t final_norm = c.family == LmFamily::kGpt2 ? 2 * c.dim : c.dim;
  const int64_t head = c.tie_embeddings ? 0 : c.vocab_size * c.dim;
  return tokenEmbedding(c) + positionEmbedding(c) + c.layers * blockParameters(c) + final_norm + head;
}

int64_t flopParameterCount(const LanguageModelConfig& c) {
  const int64_t lookups_only = positionEmbedding(c) + (c.tie_embeddings ? 0 : tokenEmbedding(c));
  return parameterCount(c) - lookups_only;
}

double fp8FlopShare(const LanguageModelConfig& c, int64_t seq_len) {
  const double d = static_cast<double>(c.dim), f = static_cast<double>(c.ffn_dim);
  const double q = static_cast<double>(c.heads * c.headDim()), kv = static_cast<double>(c.kvDim());
  // gpt2: c_attn (3 d x d), c_proj, c_fc and the MLP's c_proj; llama: wq, wk,
  // wv, wo, w1, w2, w3.
  const double per_block = c.family == LmFamily::kGpt2 ? 4 * d * d + 2 * d * f : 2 * d * q + 2 * d * kv + 3 * d * f;
  const double total = trainingFlopsPerToken(c, seq_len);
  return total > 0 ? 6.0 * per_block * static_cast<double>(c.layers) / total : 0;
}

double trainingFlopsPerToken(const LanguageModelConfig& c, int64_t seq_len) {
  const double attention = 12.0 * static_cast<double>(c.layers) * static_cast<double>(c.heads * c.headDim()) *
                           static_cast<double>(seq_len);
  return 6.0 * static_cast<double>(flopParameterCount(c)) + attention;
}

int64_t fusedHeadPaddedVocab(int64_t vocab) {
  constexpr int64_t kRowPadding = 64;  // 16-byte aligned rows whatever the vocabulary
  return (vocab + kRowPadding - 1) / kRowPadding * kRowPadding;
}

int64_t fusedHeadChunkRows(int64_t rows, int64_t vocab, int64_t element_size) {
  // GPT-2: ~5300 rows of 50304 bf16 logits; Llama 3: ~2100 rows of 128256.
  constexpr int64_t kChunkBytes = int64_t{512} << 20;
  const int64_t chunk = std::max<int64_t>(kChunkBytes / (fusedHeadPaddedVocab(vocab) * element_size), 64) / 64 * 64;
  return std::min(chunk, rows);
}

}  // namespace dtrain::models
