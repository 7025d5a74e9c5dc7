// The options of `dtrain checkpoint info|export` and their declarations
// (common/options.h). Torch-free, like train_options.h: the dtrain binary
// parses them and hands the struct to the runtime's dtrain_run_checkpoint
// (checkpoint_tools.h).
#pragma once

#include <string>

namespace dtrain {

class OptionSet;

struct CheckpointToolOptions {
  std::string action;      // "info" | "export" (the subcommand)
  std::string checkpoint;  // a checkpoint file, or a --checkpoint-dir: its newest valid checkpoint
  bool json = false;       // info: one JSON object instead of text
  std::string out;         // export: the .safetensors file to write
};

void declareCheckpointInfoOptions(OptionSet& set, CheckpointToolOptions& options);
void declareCheckpointExportOptions(OptionSet& set, CheckpointToolOptions& options);

// The declared checks and the rules across options (a checkpoint named;
// export: --out given); ConfigError naming the option and what is accepted.
void checkCheckpointToolOptions(const CheckpointToolOptions& options);

}  // namespace dtrain
