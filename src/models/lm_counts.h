// Parameter and FLOP counts of a language model computed from its config
// alone (torch-free), so an 8B model is sized without allocating it.
#pragma once

#include "models/lm_config.h"

#include <cstdint>

namespace dtrain::models {

// Every parameter the model registers; a tied output head counts once.
// With the default vocabularies these are the published counts: gpt2-124m
// 124,439,808; gpt2-350m 354,823,168; gpt2-774m 774,030,080; gpt2-1.5b
// 1,557,611,200; llama-1b 1,235,814,400; llama-3b 3,212,749,824; llama-8b
// 8,030,261,248.
int64_t parameterCount(const LanguageModelConfig& config);

// N of the FLOP count: the parameters that take part in a matrix product,
// i.e. all of them less the tables that are only looked up: gpt2's position
// embeddings, and the token embedding when the head is untied (a tied one
// is the head's weight, so it counts). Norm gains and biases are kept (they
// are few). This is nanoGPT's get_num_params() for GPT-2 and torchtitan's
// count with exclude_embedding for an untied Llama.
int64_t flopParameterCount(const LanguageModelConfig& config);

// Training FLOPs (forward + backward, a multiply-add counting 2) per token at
// sequence length seq_len: 6 N + 12 L d T, the PaLM paper's Appendix B
// formula as nanoGPT's estimate_mfu and torchtitan apply it (N above, L
// layers, d = heads x head dim, T = seq_len). The second term is attention's
// two T-long products per layer (q kᵀ and p v), counted over the full T x T
// square, not its causal half, as all three do, so MFU compares across
// codebases.
double trainingFlopsPerToken(const LanguageModelConfig& config, int64_t seq_len);

// The share of trainingFlopsPerToken that --precision fp8 computes in FP8:
// the blocks' linear layers (6 x their weights per token), not attention's
// products, nor the head. MFU stays on the bf16 peak; this says how much of
// the work ran at FP8's (torchtitan likewise reports MFU against bf16).
double fp8FlopShare(const LanguageModelConfig& config, int64_t seq_len);

// The fused classifier + cross-entropy (fused_cross_entropy.cc) computes
// the logits of at most fusedHeadChunkRows rows at once, into one buffer of
// that many rows of the vocabulary padded to a multiple of 64 (about 512
// MiB); the memory estimate sizes the buffer by the same two functions.
int64_t fusedHeadPaddedVocab(int64_t vocab);
// Rows per chunk of `rows` rows of logits of `element_size` bytes.
int64_t fusedHeadChunkRows(int64_t rows, int64_t vocab, int64_t element_size);

}  // namespace dtrain::models
