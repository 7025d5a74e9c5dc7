#include "checkpoint/checkpoint_options.h"

#include <sys/stat.h>

#include "common/error.h"
#include "common/options.h"
#include "common/units.h"

namespace dtrain {

void declareCheckpointInfoOptions(OptionSet& set, CheckpointToolOptions& o) {
  set.toggle("--json", o.json, "Print one JSON object (meta, tensors with shape and dtype) instead of text");
}

void declareCheckpointConsolidateOptions(OptionSet& set, CheckpointToolOptions& o) {
  set.path("--out", o.out,
           "The checkpoint file to write: every tensor of the checkpoint whole, in the single-file format that "
           "`dtrain train --resume`, `dtrain generate` and `dtrain checkpoint export` read")
      .creatableFile();
}

void declareCheckpointExportOptions(OptionSet& set, CheckpointToolOptions& o) {
  set.path("--out", o.out,
           "The safetensors file to write: the model's parameters and buffers under their PyTorch state-dict "
           "names, the model config as metadata (--format hf: the directory to write)")
      .creatable();
  set.choice("--format", o.format, {"safetensors", "hf"},
             "safetensors: one file of dtrain's names; hf: a Hugging Face model directory (config.json and "
             "model.safetensors) that transformers' from_pretrained loads (gpt2, llama)");
  set.choice("--dtype", o.dtype, {"auto", "fp32", "bf16", "fp16"},
             "--format hf: the dtype of the tensors written; auto keeps the checkpoint's (its parameters' dtype, "
             "float32 for dtrain's master weights)");
  set.text("--max-shard-size", o.max_shard_size,
           "--format hf: the largest safetensors file; a model over it is split into model-0000K-of-0000N.safetensors "
           "files with model.safetensors.index.json, as transformers' save_pretrained(max_shard_size=...) writes "
           "(binary multiples: 5G is 5 GiB)")
      .check(
          [](const std::string& text) {
            try {
              return parseByteSize(text, "--max-shard-size") > 0 ? std::string() : std::string("is zero");
            } catch (const ConfigError& e) {
              return std::string("is not a size");
            }
          },
          "a size such as 500M or 5G");
  set.toggle("--merge-lora", o.merge_lora,
             "A checkpoint of `dtrain train --lora-rank` (its adapters alone): rebuild its base (the --init-from "
             "directory, or the fresh weights of its seed) and export the whole model with each adapted weight "
             "W + (alpha / r) B A. Without it such a checkpoint exports its adapters (safetensors only)");
}

const char* checkpointActionName(CheckpointAction action) {
  switch (action) {
    case CheckpointAction::kInfo: return "info";
    case CheckpointAction::kConsolidate: return "consolidate";
    case CheckpointAction::kExport: return "export";
  }
  return "info";
}

void checkCheckpointToolOptions(const CheckpointToolOptions& options) {
  CheckpointToolOptions copy = options;
  const std::string action = checkpointActionName(options.action);
  OptionSet set("dtrain checkpoint " + action);
  switch (options.action) {
    case CheckpointAction::kInfo: declareCheckpointInfoOptions(set, copy); break;
    case CheckpointAction::kConsolidate: declareCheckpointConsolidateOptions(set, copy); break;
    case CheckpointAction::kExport: declareCheckpointExportOptions(set, copy); break;
  }
  set.checkAll();
  if (options.checkpoint.empty()) {
    throw ConfigError("dtrain checkpoint " + action +
                      ": expected CHECKPOINT, a checkpoint file of `dtrain train` or its checkpoint directory");
  }
  struct stat info {};
  if (::stat(options.checkpoint.c_str(), &info) != 0) {
    throw ConfigError("CHECKPOINT " + options.checkpoint +
                      ": no such file or directory; expected a checkpoint of `dtrain train` (a file or a sharded "
                      "checkpoint's directory) or its checkpoint directory");
  }
  if (options.action == CheckpointAction::kExport && options.out.empty()) {
    throw ConfigError("dtrain checkpoint export: --out is required: the .safetensors file to write");
  }
  if (options.action == CheckpointAction::kExport && options.format != "hf" &&
      (options.dtype != "auto" || options.max_shard_size != CheckpointToolOptions().max_shard_size)) {
    throw ConfigError("dtrain checkpoint export: --dtype and --max-shard-size are for --format hf (the safetensors "
                      "format keeps the checkpoint's dtype in one file)");
  }
  if (options.action == CheckpointAction::kConsolidate && options.out.empty()) {
    throw ConfigError("dtrain checkpoint consolidate: --out is required: the checkpoint file (.dtck) to write");
  }
}

}  // namespace dtrain
