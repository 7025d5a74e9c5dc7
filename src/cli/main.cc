// dtrain: one binary, one subcommand per file under cli/.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "common/error.h"
#include "common/env.h"
#include "common/log.h"
#include "common/settings.h"

namespace {

constexpr const char* kVersion = "0.1.0";

int runMain(int argc, char** argv) {
  CLI::App app{"dtrain: distributed data-parallel training on GPU clusters"};
  app.name("dtrain");
  app.set_version_flag("--version", kVersion);
  app.require_subcommand(1);
  dtrain::cli::ExitCode exit_code;

  CLI::App* bench = app.add_subcommand("bench", "Benchmarks: collectives (nccl-tests style), training throughput and the store");
  bench->require_subcommand(1);
  dtrain::cli::registerBenchCollectives(*bench, exit_code);
  dtrain::cli::registerBenchStore(*bench, exit_code);
#if DTRAIN_WITH_TRAIN
  dtrain::cli::registerBenchTrain(*bench, exit_code);
#endif
  dtrain::cli::registerLaunch(app, exit_code);
  dtrain::cli::registerExporter(app, exit_code);
  dtrain::cli::registerDoctor(app, exit_code);
  dtrain::cli::registerSlurm(app, exit_code);
#if DTRAIN_WITH_TRAIN
  dtrain::cli::registerTrain(app, exit_code);
  dtrain::cli::registerGenerate(app, exit_code);
  dtrain::cli::registerCheckpoint(app, exit_code);
#endif
#if DTRAIN_WITH_TOKENIZE
  dtrain::cli::registerTokenize(app, exit_code);
#endif
  dtrain::cli::registerSettings(app, exit_code);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints help/usage; usage errors exit 2 like torchrun's argparse.
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return exit_code.value;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (auto rank = dtrain::envInt("RANK", 0, 1 << 24)) dtrain::setProcessRank(static_cast<int>(*rank));
    // A bad DTRAIN_* variable is an error before any work, not a surprise later.
    dtrain::checkAllSettings();
  } catch (const dtrain::ConfigError& e) {
    std::fprintf(stderr, "dtrain: %s\n", e.message().c_str());
    return 2;
  }
  try {
    return runMain(argc, argv);
  } catch (const dtrain::ConfigError& e) {
    std::fprintf(stderr, "dtrain: error: %s\n", e.message().c_str());
    return 2;
  } catch (const dtrain::Error& e) {
    std::fprintf(stderr, "dtrain: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain: unexpected error: %s\n", e.what());
    return 1;
  }
}
