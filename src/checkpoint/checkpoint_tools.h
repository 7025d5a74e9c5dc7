// The runtime of `dtrain checkpoint info|consolidate|export` (the command
// is cli/checkpoint.cc), and the checkpoint lookup `dtrain generate` shares.
//
//   dtrain checkpoint info ckpt/                   what the newest valid checkpoint holds
//   dtrain checkpoint info ckpt/ckpt-000000800 --json
//   dtrain checkpoint consolidate ckpt/ckpt-000000800 --out model-800.dtck
//   dtrain checkpoint export ckpt/ --out model.safetensors
//
// CHECKPOINT is a checkpoint file, a sharded checkpoint (its directory or
// its metadata.dtck), or a --checkpoint-dir, which means its newest
// complete checkpoint whose CRCs hold (newer incomplete or corrupt ones
// are skipped with a warning). Every file of the checkpoint is verified,
// and the meta fields of a `dtrain train` checkpoint it holds checked
// (checkpoint/meta_checks.h), before anything is reported or written.
//
// info prints the checkpoint's meta (step, epoch, position, world size,
// model and its config, dataset, tokenizer, optimizer), a sharded one's
// stage and shards, and its tensors by group (model parameters and
// buffers, optimizer state, the rest) with their sizes; --json prints the
// meta, every tensor's shape and dtype and a sharded one's layout.
// consolidate writes one checkpoint file holding every logical tensor
// whole (a tied weight under each of its names), tensor by tensor: memory
// holds one tensor at a time. `dtrain train --resume`, `dtrain generate`
// and export read it.
// export writes the model's parameters ("model.param.<name>") and buffers
// ("model.buffer.<name>") as <name>: the module's state-dict names, which
// for gpt2 are nanoGPT's and for llama Meta's, so
// `model.load_state_dict(load_file(path), strict=True)` works on the same
// architecture in PyTorch (bench/peers/lm_models.py does it), in their
// saved dtype; its metadata holds "format": "pt", the step, and a language
// model's config (models/lm_config.h's languageModelMetadata pairs). A
// tied output head is stored once, as the token embedding.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "dtrain/checkpoint.h"
#include "checkpoint/checkpoint_options.h"

namespace dtrain {

// The checkpoint `path` names (see above), verified and its meta checked.
// ConfigError naming `what` and the path when a directory holds none, or
// naming the file and the field of a bad meta.
std::unique_ptr<CheckpointReader> openNamedCheckpoint(const std::string& path, const std::string& what);

// The same, with its "model.*" tensors read whole (a tied weight under
// each name), e.g. for generation.
std::pair<std::string, CheckpointState> loadNamedModel(const std::string& path, const std::string& what);

// Exit code 0; ConfigError / IoError for bad input.
int runCheckpointTool(const CheckpointToolOptions& options);

}  // namespace dtrain

extern "C" int dtrain_run_checkpoint(const dtrain::CheckpointToolOptions* options);
