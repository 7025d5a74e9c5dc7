// `dtrain train`: training of a built-in model (image or language model) on
// a built-in or given data set. Run it under `dtrain launch` (or torchrun) for several ranks:
//   dtrain launch --nproc-per-node 2 --standalone dtrain train --epochs 3
// The options are declared in train/train_options.cc; the runtime (and with
// it libtorch) is loaded only when the command runs.
#include "cli/commands.h"
#include "cli/option_binding.h"
#include "cli/training_runtime.h"
#include "train/train_options.h"

namespace dtrain::cli {

void registerTrain(CLI::App& app, ExitCode& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "train", "Training of a built-in model: image models (mlp, cnn, resnet18/34/50) on Fashion-MNIST, MNIST, "
               "CIFAR-10 or synthetic data, language models (gpt2, llama and their sizes, or a Hugging Face "
               "directory with --init-from) on token shards or Debian's fortunes; data, tensor and pipeline "
               "parallel; run it under `dtrain launch` for several ranks");
  auto bound = bindNew<TrainOptions>(*cmd, "dtrain train", declareTrainOptions);
  cmd->callback([bound, &exit_code] {
    exit_code.value = trainingRuntime<int (*)(const TrainOptions*)>("dtrain_run_training")(&bound->options);
  });
}

}  // namespace dtrain::cli
