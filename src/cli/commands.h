// Each subcommand registers itself on the CLI11 app from its own file.
// A command's callback stores its exit code in the shared ExitCode.
#pragma once

#include <CLI/CLI.hpp>

namespace dtrain::cli {

struct ExitCode {
  int value = 0;
};

void registerBenchCollectives(CLI::App& bench, ExitCode& exit_code);
void registerBenchStore(CLI::App& bench, ExitCode& exit_code);
void registerSettings(CLI::App& app, ExitCode& exit_code);
void registerLaunch(CLI::App& app, ExitCode& exit_code);
void registerExporter(CLI::App& app, ExitCode& exit_code);
void registerDoctor(CLI::App& app, ExitCode& exit_code);
void registerSlurm(CLI::App& app, ExitCode& exit_code);
// Only in builds with libtorch (DTRAIN_WITH_TRAIN).
void registerTrain(CLI::App& app, ExitCode& exit_code);
void registerGenerate(CLI::App& app, ExitCode& exit_code);
void registerCheckpoint(CLI::App& app, ExitCode& exit_code);
void registerPlan(CLI::App& app, ExitCode& exit_code);
void registerBenchTrain(CLI::App& bench, ExitCode& exit_code);
// Only in builds with the tokenizers (data/, DTRAIN_WITH_TOKENIZE).
void registerTokenize(CLI::App& app, ExitCode& exit_code);

}  // namespace dtrain::cli
