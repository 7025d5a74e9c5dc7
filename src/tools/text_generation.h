// The runtime of `dtrain generate` (the command is cli/generate.cc):
// samples text from a language-model checkpoint of `dtrain train`.
//
//   dtrain generate --checkpoint ckpt/ --prompt "Hello" --max-new-tokens 50 --temperature 0.8 --top-k 40
//
// 1. The checkpoint: --checkpoint's file, or the newest valid one in its
//    directory. Its meta "model_config" rebuilds the model (gpt2 or llama);
//    every parameter is copied from its "model.param.<name>" tensor.
// 2. The tokenizer: the checkpoint's meta "tokenizer" {kind, path} (written
//    when it trained on the embedded corpus); --tokenizer and
//    --tokenizer-dir override it, and are required when it has none (a
//    model trained on token shards).
// 3. The prompt is encoded (an empty one starts from the end-of-text token,
//    as a new document), fed once through the model into a KV cache
//    (models/kv_cache.h), then each sampled token is fed alone: up to
//    --max-new-tokens tokens, stopping early at the end-of-text token
//    (which is not printed). Greedy for --temperature 0, else softmax of
//    logits / temperature over the --top-k most likely tokens (all for 0),
//    drawn with the device's generator seeded by --seed: the same seed,
//    device and precision give the same text.
// 4. stdout: the prompt and the completion, decoded together, and a
//    newline. stderr: the model and where it runs, then the timing
//    (tokens/s).
//
// Limits (checked before anything is sampled): the prompt and the new
// tokens together must fit the model's positions (max_seq_len: gpt2's
// learned position table, llama's rotary table); a longer --prompt or
// --max-new-tokens is a ConfigError naming it and the limit, rather than a
// completion cut short. Every bad input is a ConfigError naming it: a
// missing checkpoint, a directory without a valid one, a checkpoint of an
// image model, a missing or mismatched parameter, no tokenizer, a tokenizer
// with more ids than the model's vocabulary, --device cuda without CUDA.
// (private to tools/)
#pragma once

#include "tools/generate_options.h"

namespace dtrain {

// Returns the process exit code (0 on success).
int runGeneration(const GenerateOptions& options);

}  // namespace dtrain

// The same, with C linkage: the dtrain binary loads the runtime with dlopen
// when `dtrain generate` runs and calls this.
extern "C" int dtrain_run_generate(const dtrain::GenerateOptions* options);
