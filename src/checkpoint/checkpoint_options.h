// The options of `dtrain checkpoint info|consolidate|export` and their declarations
// (common/options.h). Torch-free, like train_options.h: the dtrain binary
// parses them and hands the struct to the runtime's dtrain_run_checkpoint
// (checkpoint_tools.h).
#pragma once

#include <string>

namespace dtrain {

class OptionSet;

// The subcommand of `dtrain checkpoint`.
enum class CheckpointAction { kInfo, kConsolidate, kExport };

// "info" | "consolidate" | "export", as the subcommand is spelled.
const char* checkpointActionName(CheckpointAction action);

struct CheckpointToolOptions {
  CheckpointAction action = CheckpointAction::kInfo;
  // A checkpoint file, a sharded checkpoint's directory, or a
  // --checkpoint-dir: its newest valid checkpoint.
  std::string checkpoint;
  bool json = false;  // info: one JSON object instead of text
  std::string out;    // consolidate: the .dtck file to write; export: the .safetensors file (hf: a directory)
  std::string format = "safetensors";  // export: safetensors | hf
  bool merge_lora = false;  // export: a LoRA run's adapters folded into its base (checkpoint/lora_merge.h)
  std::string dtype = "auto";  // export --format hf: auto (the checkpoint's) | fp32 | bf16 | fp16
  std::string max_shard_size = "5G";  // export --format hf: files of at most this many bytes, with an index
};

void declareCheckpointInfoOptions(OptionSet& set, CheckpointToolOptions& options);
void declareCheckpointConsolidateOptions(OptionSet& set, CheckpointToolOptions& options);
void declareCheckpointExportOptions(OptionSet& set, CheckpointToolOptions& options);

// The declared checks and the rules across options (a checkpoint named;
// consolidate and export: --out given); ConfigError naming the option and
// what is accepted.
void checkCheckpointToolOptions(const CheckpointToolOptions& options);

}  // namespace dtrain
