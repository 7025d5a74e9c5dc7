// The options of `dtrain generate` (sampling text from a language-model
// checkpoint) and their declarations (common/options.h): names, defaults,
// help and accepted values live in generate_options.cc and nowhere else.
//
// Torch-free, like train_options.h: the dtrain binary parses them without
// loading libtorch and hands the struct to the runtime's
// dtrain_run_generate (text_generation.h).
#pragma once

#include <cstdint>
#include <string>

#include "train/train_options.h"  // TokenizerKind, ComputePrecision

namespace dtrain {

class OptionSet;

// --device: where to run (auto: cuda when available).
enum class GenerateDevice { kAuto, kCpu, kCuda };

struct GenerateOptions {
  std::string checkpoint;        // a checkpoint file, or a directory: its newest valid checkpoint
  std::string prompt;            // "" : an unconditioned sample, from the end-of-text token
  int64_t max_new_tokens = 64;   // prompt + new tokens must fit the model's positions
  double temperature = 1.0;      // 0: greedy (argmax)
  int64_t top_k = 0;             // 0: all of the vocabulary
  uint64_t seed = 0;             // the sampling generator's seed
  TokenizerKind tokenizer = TokenizerKind::kUnset;  // kUnset: the checkpoint's
  std::string tokenizer_dir;     // gpt2, hf: a directory; sentencepiece: the .model file
  GenerateDevice device = GenerateDevice::kAuto;
  ComputePrecision precision = ComputePrecision::kFp32;  // fp32 | bf16 (autocast)
};

void declareGenerateOptions(OptionSet& set, GenerateOptions& options);

// Every declared check and the cross-option rules (--checkpoint given and
// existing); ConfigError naming the option, the value and what is accepted.
void checkGenerateOptions(const GenerateOptions& options);

}  // namespace dtrain
