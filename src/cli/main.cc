// dtrain: one binary, one subcommand per file under cli/.
#include <cstdio>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "common/error.h"
#include "common/env.h"
#include "common/log.h"
#include "common/settings.h"

namespace dtrain::cli {
const char* versionNumber();  // version_info.cc
const char* gitRevision();
}  // namespace dtrain::cli

namespace {

// `dtrain --version`: the version, the commit it was built from, and what
// this build carries (version_info.cc is written at build time).
std::string versionText() {
  std::string text = std::string("dtrain ") + dtrain::cli::versionNumber() + " (git " + dtrain::cli::gitRevision() + ")";
  std::string parts;
#ifdef DTRAIN_HAVE_GLOO
  parts += " gloo";
#endif
#ifdef DTRAIN_HAVE_NCCL
  parts += " nccl";
#endif
#if DTRAIN_WITH_TRAIN
  parts += " libtorch-" DTRAIN_TORCH_VERSION;
#endif
  return text + "\nbuilt with:" + (parts.empty() ? std::string(" the launcher and tools only") : parts);
}

int runMain(int argc, char** argv) {
  CLI::App app{"dtrain: distributed data-parallel training on GPU clusters"};
  app.name("dtrain");
  app.set_version_flag("--version", versionText);
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
