#include "tools/generate_options.h"

#include <sys/stat.h>

#include "common/error.h"
#include "common/options.h"

namespace dtrain {

void declareGenerateOptions(OptionSet& set, GenerateOptions& o) {
  set.path("--checkpoint", o.checkpoint,
           "A language-model checkpoint of `dtrain train`, or its --checkpoint-dir (the newest valid one there), or "
           "a Hugging Face model directory (config.json and its safetensors, as --init-from takes; its "
           "tokenizer.json when it has one)");
  set.text("--prompt", o.prompt, "The text to continue (empty: a sample from the start of a document)");
  set.integer("--max-new-tokens", o.max_new_tokens,
              "Tokens to sample after the prompt (fewer when the end-of-text token comes); gpt2 sees the last "
              "--seq-len tokens it was trained at (a sliding window), llama's prompt and new tokens must fit its "
              "positions")
      .range(1, int64_t{1} << 24);
  set.number("--temperature", o.temperature, "Divides the logits before sampling (0: greedy, the argmax)")
      .range(0, 1000);
  set.integer("--top-k", o.top_k, "Sample among the k most likely tokens (0: all)").range(0, int64_t{1} << 24);
  set.integer("--seed", o.seed, "Seed of the sampling generator (the same seed gives the same text)");
  declareTokenizerChoice(
      set, o.tokenizer,
      "How text becomes tokens; overrides the checkpoint's (needed for one trained on token shards that "
      "`dtrain tokenize` did not write)")
      .optional(TokenizerKind::kUnset, "the checkpoint's");
  set.path("--tokenizer-dir", o.tokenizer_dir,
           "gpt2: the directory of encoder.json and vocab.bpe (or vocab.json and merges.txt); hf: the directory of "
           "a Hugging Face tokenizer.json; sentencepiece: the .model file (overrides the checkpoint's; without "
           "--tokenizer, the kind is what it holds)");
  set.choice("--device", o.device,
             {{"auto", GenerateDevice::kAuto}, {"cpu", GenerateDevice::kCpu}, {"cuda", GenerateDevice::kCuda}},
             "Where to run (auto: cuda when available)");
  set.choice("--precision", o.precision, {{"fp32", ComputePrecision::kFp32}, {"bf16", ComputePrecision::kBf16}},
             "fp32 throughout, or bf16 autocast with a bf16 KV cache");
}

void checkGenerateOptions(const GenerateOptions& options) {
  GenerateOptions copy = options;
  OptionSet set("dtrain generate");
  declareGenerateOptions(set, copy);
  set.checkAll();
  if (options.checkpoint.empty()) {
    throw ConfigError("--checkpoint is required: a checkpoint file of `dtrain train`, or its checkpoint directory");
  }
  // stat(2), not std::filesystem: PyTorch's 2.x wheels export their own copy
  // of it from libtorch.so (see train/checkpoint.cc), and this runs beside it.
  struct stat info {};
  if (::stat(options.checkpoint.c_str(), &info) != 0) {
    throw ConfigError("--checkpoint " + options.checkpoint +
                      ": no such file or directory; expected a checkpoint file or a checkpoint directory");
  }
}

}  // namespace dtrain
