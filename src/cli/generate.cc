// `dtrain generate`: samples text from a language-model checkpoint of
// `dtrain train` (gpt2 or llama), with a KV cache:
//   dtrain generate --checkpoint ckpt/ --prompt "Hello" --max-new-tokens 50 --temperature 0.8 --top-k 40
// The options are declared in train/generate_options.cc; the runtime (and
// with it libtorch) is loaded only when the command runs
// (train/text_generation.h says what it does).
#include "cli/commands.h"
#include "cli/option_binding.h"
#include "cli/training_runtime.h"
#include "tools/generate_options.h"

namespace dtrain::cli {

void registerGenerate(CLI::App& app, ExitCode& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "generate", "Sample text from a language-model checkpoint of `dtrain train` (gpt2, llama): the prompt and "
                  "its continuation on stdout, tokens/s on stderr");
  auto bound = bindNew<GenerateOptions>(*cmd, "dtrain generate", declareGenerateOptions);
  cmd->callback([bound, &exit_code] {
    exit_code.value = trainingRuntime<int (*)(const GenerateOptions*)>("dtrain_run_generate")(&bound->options);
  });
}

}  // namespace dtrain::cli
