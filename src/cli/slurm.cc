// `dtrain slurm conf|hostnames`: scheduler glue (doctor/slurm_node.h,
// common/hostlist.h).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/option_binding.h"
#include "common/env.h"
#include "common/error.h"
#include "common/hostlist.h"
#include "common/system_root.h"
#include "doctor/slurm_node.h"

namespace dtrain::cli {
namespace {

// --only: which part of the configuration to print (kBoth: not given).
enum class SlurmConfPart { kBoth, kNode, kGres };

struct SlurmConfFlags {
  std::string root = "/";
  SlurmConfPart only = SlurmConfPart::kBoth;
  bool gres_files = false;
  bool no_gpus = false;
};

int runSlurmConf(const SlurmConfFlags& flags) {
  SystemRoot root(flags.root);
  doctor::SlurmNode node = doctor::describeSlurmNode(root, !flags.no_gpus);
  const bool all = flags.only == SlurmConfPart::kBoth;
  if (all) std::printf("# slurm.conf\n");
  if (all || flags.only == SlurmConfPart::kNode) std::printf("%s\n", doctor::slurmNodeLine(node).c_str());
  if (all) std::printf("# gres.conf\n");
  if (all || flags.only == SlurmConfPart::kGres) {
    for (const std::string& line : doctor::gresConfLines(node, flags.gres_files)) std::printf("%s\n", line.c_str());
  }
  return 0;
}

// `expression` is nullopt when none was given.
int runSlurmHostnames(const std::optional<std::string>& expression) {
  std::string text = expression.value_or("");
  if (!expression) {
    const std::optional<std::string> nodelist = envString("SLURM_JOB_NODELIST");
    if (!nodelist || nodelist->empty()) {
      throw ConfigError("dtrain slurm hostnames: expected a hostlist expression such as 'node[01-04]' "
                        "(or SLURM_JOB_NODELIST set)");
    }
    text = *nodelist;
  }
  for (const std::string& host : expandHostlist(text)) std::printf("%s\n", host.c_str());
  return 0;
}

void declareSlurmConfOptions(OptionSet& set, SlurmConfFlags& f) {
  set.path("--root", f.root, "Read /proc and /sys under this directory instead of /").existingDirectory();
  set.choice("--only", f.only, {{"node", SlurmConfPart::kNode}, {"gres", SlurmConfPart::kGres}},
             "Print only the slurm.conf node line (node) or the gres.conf lines (gres)")
      .optional(SlurmConfPart::kBoth, "both");
  set.toggle("--gres-files", f.gres_files,
             "gres.conf: one 'Name=gpu Type= File=/dev/nvidia[...]' line per GPU type instead of AutoDetect=nvml");
  set.toggle("--no-gpus", f.no_gpus, "Do not open NVML: no Gres, no gres.conf lines");
}

}  // namespace

void registerSlurm(CLI::App& app, ExitCode& exit_code) {
  CLI::App* slurm = app.add_subcommand("slurm", "Slurm glue: this node's slurm.conf lines, hostlist expansion");
  slurm->require_subcommand(1);

  CLI::App* conf = slurm->add_subcommand(
      "conf", "Print this node's slurm.conf NodeName line (the fields of `slurmd -C`, plus Gres) and gres.conf lines");
  auto bound = bindNew<SlurmConfFlags>(*conf, "dtrain slurm conf", declareSlurmConfOptions);
  conf->callback([bound, &exit_code] { exit_code.value = runSlurmConf(bound->options); });

  CLI::App* hostnames = slurm->add_subcommand(
      "hostnames", "Expand a hostlist expression one name per line, as `scontrol show hostnames` does");
  auto expression = std::make_shared<std::string>();
  CLI::Option* given = hostnames->add_option("EXPRESSION", *expression,
                                             "A hostlist such as 'node[01-04],gpu[1-2]' (default: SLURM_JOB_NODELIST)");
  hostnames->callback([expression, given, &exit_code] {
    exit_code.value = runSlurmHostnames(given->count() > 0 ? std::optional(*expression) : std::nullopt);
  });
}

}  // namespace dtrain::cli
