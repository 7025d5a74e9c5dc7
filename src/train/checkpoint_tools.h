// The runtime of `dtrain checkpoint info|export` (the command is
// cli/checkpoint.cc), and the checkpoint lookup `dtrain generate` shares.
//
//   dtrain checkpoint info ckpt/                 what the newest valid checkpoint holds
//   dtrain checkpoint info ckpt/ckpt-000000800.dtck --json
//   dtrain checkpoint export ckpt/ --out model.safetensors
//
// info prints the checkpoint's meta (step, epoch, position, world size,
// model and its config, dataset, tokenizer, optimizer) and its tensors by
// group (model parameters and buffers, optimizer state, the rest) with
// their sizes; --json prints the meta and every tensor's shape and dtype.
// export writes the model's parameters ("model.param.<name>") and buffers
// ("model.buffer.<name>") as <name>: the module's state-dict names, which
// for gpt2 are nanoGPT's and for llama Meta's, so
// `model.load_state_dict(load_file(path), strict=True)` works on the same
// architecture in PyTorch (bench/peers/lm_models.py does it), in their
// saved dtype; its metadata holds "format": "pt", the step, and a language
// model's config (models/lm_config.h's languageModelMetadata pairs). A
// tied output head is stored once, as the token embedding.
#pragma once

#include <string>
#include <utility>

#include "dtrain/checkpoint.h"
#include "train/checkpoint_options.h"

namespace dtrain {

// `path`'s checkpoint, or the newest valid one when it is a directory
// (ConfigError naming `what` and the path when it holds none).
std::pair<std::string, CheckpointState> loadNamedCheckpoint(const std::string& path, const std::string& what);

// Exit code 0; ConfigError / IoError for bad input.
int runCheckpointTool(const CheckpointToolOptions& options);

}  // namespace dtrain

extern "C" int dtrain_run_checkpoint(const dtrain::CheckpointToolOptions* options);
