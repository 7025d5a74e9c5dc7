// The command-line grammar over the declared options: spellings, values, the
// script boundary, PET_ variables, --help text and the docs table.
#include "launch/launch_flags.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "launch/launch_config.h"
#include "launch/launch_options.h"
#include "tests/support/text.h"

namespace dtrain {
namespace {

using Args = std::vector<std::string>;

// The tokenizer over the launcher's declared options.
LaunchArgs readLaunchArgs(const Args& args) {
  LaunchFlags flags;
  return dtrain::readLaunchArgs(flags.set, args);
}

std::string valueOf(const Args& args, const std::string& flag) {
  LaunchArgs parsed = readLaunchArgs(args);
  auto it = parsed.values.find(flag);
  return it == parsed.values.end() ? "(unset)" : it->second.value;
}

std::string flagsError(const Args& args) {
  return testing::configErrorOf([&] { readLaunchArgs(args); });
}

TEST(LaunchFlagsTest, EverySpellingOfAValue) {
  for (const Args& args : {Args{"--nproc-per-node", "4"}, Args{"--nproc_per_node", "4"},
                           Args{"--nproc-per-node=4"}, Args{"--nproc_per_node=4"},
                           Args{"--nproc-per", "4"}, Args{"--nproc_per_no=4"}}) {
    EXPECT_EQ(valueOf(args, "nproc-per-node"), "4") << args[0];
  }
  EXPECT_EQ(valueOf({"--rdzv-conf=join_timeout=5,is_host=1"}, "rdzv-conf"), "join_timeout=5,is_host=1")
      << "only the first '=' separates";
  EXPECT_EQ(valueOf({"--log-dir="}, "log-dir"), "");
  EXPECT_EQ(valueOf({"--node-rank", "-1"}, "node-rank"), "-1") << "a negative number is a value";
  EXPECT_EQ(valueOf({"--nnodes", "1", "--nnodes", "2"}, "nnodes"), "2") << "the last one wins";
}

TEST(LaunchFlagsTest, EveryFlagHasBothSpellings) {
  LaunchFlags flags;
  for (const auto& flag : flags.set.options()) {
    const std::string name = flag->longName().substr(2);
    std::string dashed = flag->longName(), underscored = dashed;
    for (size_t i = 2; i < underscored.size(); ++i) underscored[i] = underscored[i] == '-' ? '_' : underscored[i];
    for (const std::string& spelling : {dashed, underscored}) {
      Args args = {spelling};
      if (!flag->isSwitch()) args.push_back("v");
      LaunchArgs parsed = readLaunchArgs(args);
      ASSERT_EQ(parsed.values.count(name), 1u) << spelling;
      EXPECT_EQ(parsed.values.at(name).origin, spelling);
      EXPECT_EQ(parsed.script_index, args.size());
    }
  }
}

TEST(LaunchFlagsTest, ShortFlags) {
  for (const Args& args : {Args{"-r", "3"}, Args{"-r3"}, Args{"-r=3"}}) EXPECT_EQ(valueOf(args, "redirects"), "3");
  EXPECT_EQ(valueOf({"-t", "0:1,1:2"}, "tee"), "0:1,1:2");
  EXPECT_EQ(valueOf({"-m", "pkg.main"}, "module"), "1");
  EXPECT_EQ(readLaunchArgs({"-m", "pkg.main"}).script_index, 1u);
}

TEST(LaunchFlagsTest, TheScriptAndEverythingAfterItBelongToTheWorker) {
  LaunchArgs parsed = readLaunchArgs({"--nnodes", "2", "train.py", "--nnodes", "5", "--frobnicate"});
  EXPECT_EQ(parsed.script_index, 2u);
  EXPECT_EQ(parsed.values.at("nnodes").value, "2");
  EXPECT_EQ(readLaunchArgs({"--standalone", "--", "--weird-script", "-x"}).script_index, 2u);
  EXPECT_EQ(readLaunchArgs({"--standalone"}).script_index, 1u) << "no script";
  EXPECT_EQ(readLaunchArgs({"-", "x"}).script_index, 0u) << "a lone '-' is a script name";
  EXPECT_EQ(readLaunchArgs({"train.py", "--help"}).help, false) << "the script's own --help";
}

TEST(LaunchFlagsTest, HelpBeforeTheScript) {
  EXPECT_TRUE(readLaunchArgs({"--help"}).help);
  EXPECT_TRUE(readLaunchArgs({"--nnodes", "2", "-h", "--frobnicate"}).help) << "stops at --help";
}

TEST(LaunchFlagsTest, Mistakes) {
  EXPECT_EQ(flagsError({"--frobnicate", "train.py"}),
            "unrecognized argument --frobnicate (dtrain launch --help lists the flags)");
  EXPECT_EQ(flagsError({"--frobnicate=3"}), "unrecognized argument --frobnicate (dtrain launch --help lists the flags)");
  EXPECT_EQ(flagsError({"-u", "train.py"}), "unrecognized argument -u (dtrain launch --help lists the flags)");
  EXPECT_EQ(flagsError({"-mpkg"}), "unrecognized argument -mpkg (-m takes no value)");
  EXPECT_EQ(flagsError({"--master", "x"}), "ambiguous option --master could match --master-addr, --master-port");
  EXPECT_EQ(flagsError({"--nnodes"}), "--nnodes expects a value: --nnodes MIN:MAX");
  EXPECT_EQ(flagsError({"--nproc_per_node", "--standalone", "t.py"}),
            "--nproc_per_node expects a value: --nproc_per_node N");
  EXPECT_EQ(flagsError({"--standalone=1"}), "--standalone takes no value (got '1')");
}

TEST(LaunchFlagsTest, PetVariablesFillOnlyWhatIsMissing) {
  EXPECT_EQ(petVariable("nproc-per-node"), "PET_NPROC_PER_NODE");
  EXPECT_EQ(petVariable("rdzv-conf"), "PET_RDZV_CONF");
  LaunchFlags flags;
  LaunchArgs parsed = readLaunchArgs({"--nnodes", "2"});
  addPetValues(flags.set, parsed, {{"PET_NNODES", "5"}, {"PET_NPROC_PER_NODE", "3"}, {"PET_LOG_DIR", ""}, {"NNODES", "9"}});
  EXPECT_EQ(parsed.values.at("nnodes").where(), "--nnodes 2");
  EXPECT_EQ(parsed.values.at("nproc-per-node").where(), "PET_NPROC_PER_NODE=3");
  EXPECT_EQ(parsed.values.count("log-dir"), 0u) << "an empty PET_ variable counts as unset";
}

TEST(LaunchFlagsTest, ValueConversions) {
  FlagValue v{"2.5", "--x", false};
  EXPECT_EQ(v.toSeconds(false), std::chrono::milliseconds(2500));
  for (const char* yes : {"1", "true", "T", "yes", "y", "on"}) EXPECT_TRUE((FlagValue{yes, "PET_X", true}).toBool()) << yes;
  for (const char* no : {"0", "false", "f", "no", "N", "off"}) EXPECT_FALSE((FlagValue{no, "PET_X", true}).toBool()) << no;
  EXPECT_TRUE((FlagValue{"1", "--standalone", false}).toSwitch());
  EXPECT_FALSE((FlagValue{"0", "PET_STANDALONE", true}).toSwitch());
  EXPECT_EQ(splitList("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
}

TEST(LaunchFlagsTest, UsageListsEveryFlagWithItsDefault) {
  const std::string usage = launchUsage();
  EXPECT_EQ(usage.rfind("usage: dtrain launch [options] training_script [training_script_args ...]\n", 0), 0u);
  LaunchFlags flags;
  for (const auto& flag : flags.set.options()) {
    EXPECT_NE(usage.find(flag->longName()), std::string::npos) << flag->longName();
    const std::string first_words = flag->help().substr(0, 20);
    EXPECT_NE(usage.find(first_words), std::string::npos) << flag->longName();
  }
  for (const std::string& line : splitList(usage, '\n')) EXPECT_LE(line.size(), 80u) << line;
  EXPECT_NE(usage.find("  -r, --redirects STD"), std::string::npos);
  EXPECT_NE(usage.find("  --nnodes MIN:MAX      number of nodes"), std::string::npos) << "argparse's column 24";
  EXPECT_NE(usage.find("(default: 1:1)"), std::string::npos);
  EXPECT_NE(usage.find("PET_NPROC_PER_NODE"), std::string::npos);
}

// The flags' values are parsed by their declarations: each field starts at
// its declared default, and a refusal names where the value came from.
TEST(LaunchFlagsTest, DeclaredDefaultsAndValueChecks) {
  LaunchFlags flags;
  EXPECT_EQ(flags.values.config.rendezvous.min_nodes, 1);
  EXPECT_EQ(flags.values.config.master_addr, "127.0.0.1");
  EXPECT_EQ(flags.values.config.monitor_interval, std::chrono::milliseconds(100));
  EXPECT_EQ(flags.values.config.rendezvous.backend, RendezvousBackend::kStatic);
  EXPECT_EQ(flags.values.start_method, StartMethod::kSpawn);
  EXPECT_EQ(flags.set.find("--signals-to-handle")->defaultText(), "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2");
  EXPECT_EQ(flags.set.find("--rdzv-backend")->defaultText(), "static");

  LaunchArgs parsed = readLaunchArgs({"--rdzv_backend=etcd-v3", "--start-method", "fork", "-r3", "t.py"});
  giveValues(flags.set, parsed);
  EXPECT_EQ(flags.values.config.rendezvous.backend, RendezvousBackend::kEtcd) << "etcd-v3 is an alias";
  EXPECT_EQ(flags.values.start_method, StartMethod::kFork);
  EXPECT_EQ(flags.values.redirects.all, StreamSet::kBoth);

  addPetValues(flags.set, parsed, {{"PET_START_METHOD", "thread"}});
  EXPECT_EQ(testing::configErrorOf([&] { giveValues(flags.set, parsed); }), "") << "the flag wins over PET_";
  LaunchArgs from_env;
  addPetValues(flags.set, from_env, {{"PET_START_METHOD", "thread"}});
  EXPECT_EQ(testing::configErrorOf([&] { giveValues(flags.set, from_env); }),
            "PET_START_METHOD=thread: expected spawn, fork or forkserver");
}

TEST(LaunchFlagsTest, TheDocsTableComesFromTheDeclaration) {
  const std::string md = launchFlagsMarkdown();
  EXPECT_EQ(md.rfind("### `dtrain launch`\n", 0), 0u) << md;
  EXPECT_NE(md.find("| `--nnodes` | MIN:MAX | `1:1` | N or MIN:MAX, positive integers | number of nodes"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| `-r/--redirects` | STD | `0` |"), std::string::npos) << md;
  EXPECT_NE(md.find("| `--rdzv-backend` | choice | `static` | static, c10d or etcd"), std::string::npos) << md;
  EXPECT_NE(md.find("| `--standalone` | switch |  | no value |"), std::string::npos) << md;
  EXPECT_NE(md.find("PET_NPROC_PER_NODE"), std::string::npos) << md;
}

}  // namespace
}  // namespace dtrain
