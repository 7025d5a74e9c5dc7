// `dtrain checkpoint info|consolidate|export`: what a checkpoint of
// `dtrain train` holds, the whole of a sharded one in one file, and its
// model's weights as a safetensors file:
//   dtrain checkpoint info ckpt/ [--json]
//   dtrain checkpoint consolidate ckpt/ckpt-000000800 --out ckpt-800.dtck
//   dtrain checkpoint export ckpt/ --out model.safetensors
// The options are declared in checkpoint/checkpoint_options.cc; the runtime (and
// with it libtorch) is loaded only when the command runs
// (train/checkpoint_tools.h says what it does).
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/option_binding.h"
#include "cli/training_runtime.h"
#include "checkpoint/checkpoint_options.h"

namespace dtrain::cli {
namespace {

template <typename Declare>
void registerAction(CLI::App& parent, CheckpointAction action, const std::string& help, Declare declare,
                    ExitCode& exit_code) {
  const std::string name = checkpointActionName(action);
  CLI::App* cmd = parent.add_subcommand(name, help);
  auto bound = bindNew<CheckpointToolOptions>(*cmd, "dtrain checkpoint " + name, declare);
  bound->options.action = action;
  cmd->add_option("CHECKPOINT", bound->options.checkpoint,
                  "A checkpoint of `dtrain train` (a file, or a sharded checkpoint's directory), or its "
                  "--checkpoint-dir (the newest valid one there)")
      ->required();
  cmd->callback([bound, &exit_code] {
    exit_code.value =
        trainingRuntime<int (*)(const CheckpointToolOptions*)>("dtrain_run_checkpoint")(&bound->options);
  });
}

}  // namespace

void registerCheckpoint(CLI::App& app, ExitCode& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "checkpoint", "Inspect a checkpoint of `dtrain train`, consolidate a sharded one, or export its weights");
  cmd->require_subcommand(1);
  registerAction(*cmd, CheckpointAction::kInfo,
                 "What a checkpoint holds: step, position, world size, model and config, tokenizer, optimizer, "
                 "tensors",
                 declareCheckpointInfoOptions, exit_code);
  registerAction(*cmd, CheckpointAction::kConsolidate,
                 "Write a checkpoint (sharded or not) as one file holding every tensor whole, which --resume, "
                 "`dtrain generate` and export read",
                 declareCheckpointConsolidateOptions, exit_code);
  registerAction(*cmd, CheckpointAction::kExport,
                 "Write the model's weights as a safetensors file under PyTorch state-dict names (gpt2: nanoGPT's; "
                 "llama: Meta's)",
                 declareCheckpointExportOptions, exit_code);
}

}  // namespace dtrain::cli
