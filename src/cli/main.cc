// dtrain: one binary, one subcommand per file under cli/.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

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

// Edits (insert, delete, replace) between two words.
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// After "The following arguments were not expected": for each --flag of
// the command line the command does not know, the nearest one it does
// ("dtrain train: unknown flag --modle; did you mean --model?").
void suggestFlags(CLI::App& app, int argc, char** argv) {
  CLI::App* command = &app;
  for (auto subs = command->get_subcommands(); !subs.empty(); subs = command->get_subcommands()) command = subs.front();
  std::vector<std::string> known;
  for (const CLI::Option* option : command->get_options()) {
    for (const std::string& name : option->get_lnames()) known.push_back("--" + name);
  }
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (!arg.starts_with("--") || arg.size() < 3) continue;
    arg = arg.substr(0, arg.find('='));
    if (command->get_option_no_throw(arg) != nullptr) continue;
    std::string best;
    size_t best_distance = std::max<size_t>(2, arg.size() / 3) + 1;
    for (const std::string& name : known) {
      const size_t d = editDistance(arg, name);
      if (d < best_distance) {
        best = name;
        best_distance = d;
      }
    }
    std::string where;  // "dtrain bench train"
    for (const CLI::App* a = command; a != nullptr; a = a->get_parent()) {
      where = a->get_name() + (where.empty() ? "" : " " + where);
    }
    std::fprintf(stderr, "%s: unknown flag %s%s\n", where.c_str(), arg.c_str(),
                 best.empty() ? "; `--help` lists the flags" : ("; did you mean " + best + "?").c_str());
  }
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
  dtrain::cli::registerPlan(app, exit_code);
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
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) suggestFlags(app, argc, argv);
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
