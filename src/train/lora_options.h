// The LoRA flags of `dtrain train` (--lora-rank, --lora-alpha,
// --lora-targets): their declaration, the adapters they ask for, and what
// they cannot run with. Torch-free, like train_options.h (the adapters
// themselves are models/lora.h's).
//
// Supported: gpt2 and llama (new, or --init-from a Hugging Face
// directory), replicated data parallelism and --shard optimizer|gradients
// (ZeRO-1/2; the frozen weights are replicated, only the adapters have
// gradients, buckets and optimizer state), --dp-replicate. Refused (exit 2,
// naming the flag): image models, --tp and --pp (their plans split the
// layers, not the adapters), --shard full (ZeRO-3 shards trainable
// parameters only; the frozen base would stay whole on every rank).
#pragma once

#include "models/lora_config.h"
#include "train/train_options.h"

namespace dtrain {

void declareLoraOptions(OptionSet& set, LoraSpec& spec);

// The adapters the flags ask for (rank 0: none), defaults filled in:
// alpha the rank, targets q,v.
models::LoraConfig loraConfigOf(const LoraSpec& spec);

// The rules across options; ConfigError naming the flag and what is
// expected (see above), and the targets the model's family lacks.
void checkLoraRun(const TrainOptions& options);

}  // namespace dtrain
