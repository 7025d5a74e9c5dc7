// Options declared once (common/options.h): every kind refuses what it
// should with a message naming the option, the value and what is accepted;
// checkAll() checks a struct filled in by code; arguments() forwards the
// values that differ from the defaults; the docs table lists every option.
#include "common/options.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "tests/support/text.h"

namespace dtrain {
namespace {

struct Sample {
  int64_t batch = 64;
  int workers = 2;
  uint64_t seed = 0;
  int port = 0;
  double lr = 0.1;
  double momentum = 0.9;
  double step_epochs = 0;
  std::string optimizer = "sgd";
  std::string dir;
  std::string file;
  std::string out;
  std::string size = "32M";
  bool fast = false;
  bool graphs = true;
  std::string internal;
};

void declare(OptionSet& set, Sample& s) {
  set.integer("-b,--batch-size", s.batch, "Samples per step").range(1, 1024);
  set.integer("--workers", s.workers, "Threads").range(0, 64);
  set.integer("--seed", s.seed, "Seed");
  set.port("--metrics-port", s.port, "Port").zeroAllowed("off");
  set.number("--lr", s.lr, "Learning rate").range(0, 10);
  set.number("--momentum", s.momentum, "Momentum").atLeast(0).below(1);
  set.number("--step-epochs", s.step_epochs, "Decay period").above(0).defaultMeans("epochs / 3");
  set.choice("--optimizer", s.optimizer, {"sgd", "adamw"}, "Optimizer");
  set.path("--data-dir", s.dir, "Data").existingDirectory();
  set.path("--resume", s.file, "A checkpoint").existingFile();
  set.path("--trace", s.out, "Trace file").creatable();
  set.text("--size", s.size, "A size")
      .check([](const std::string& t) { return t.empty() || t.back() == 'M' ? "" : "no M"; }, "a size in M");
  set.toggle("--fast", s.fast, "Go fast");
  set.negatedToggle("--no-graphs", s.graphs, "No graphs");
  set.text("--internal", s.internal, "Plumbing").hide().notForwarded();
}

class OptionsTest : public ::testing::Test {
 protected:
  OptionsTest() : set_("dtrain sample") { declare(set_, sample_); }

  // The message set() raises for `value` of option `name`, or "" when accepted.
  std::string rejection(const std::string& name, const std::string& value) {
    return testing::configErrorOf([&] { set_.find(name)->set(value); });
  }

  Sample sample_;
  OptionSet set_;
};

TEST_F(OptionsTest, IntegersRefuseOutOfRangeOverflowAndJunk) {
  EXPECT_EQ(rejection("--batch-size", "0"), "-b/--batch-size '0': out of range; expected an integer from 1 to 1024");
  EXPECT_EQ(rejection("--batch-size", "2147483647"),
            "-b/--batch-size '2147483647': out of range; expected an integer from 1 to 1024");
  EXPECT_EQ(rejection("--batch-size", "99999999999999999999999"),
            "-b/--batch-size '99999999999999999999999': out of range; expected an integer from 1 to 1024");
  EXPECT_EQ(rejection("--batch-size", "12x"), "-b/--batch-size '12x': not an integer; expected an integer from 1 to 1024");
  EXPECT_EQ(rejection("--batch-size", ""), "-b/--batch-size '': not an integer; expected an integer from 1 to 1024");
  EXPECT_EQ(rejection("--batch-size", "1.5"), "-b/--batch-size '1.5': not an integer; expected an integer from 1 to 1024");
  EXPECT_EQ(rejection("--workers", "99999999999"),
            "--workers '99999999999': out of range; expected an integer from 0 to 64");
  EXPECT_EQ(rejection("--batch-size", "256"), "");
  EXPECT_EQ(sample_.batch, 256);
}

TEST_F(OptionsTest, UnsignedIntegersRefuseNegativeValuesInsteadOfWrappingAround) {
  EXPECT_EQ(rejection("--seed", "-1"), "--seed '-1': out of range; expected an integer >= 0");
  EXPECT_EQ(rejection("--seed", "18446744073709551616"),
            "--seed '18446744073709551616': out of range; expected an integer >= 0");
  EXPECT_EQ(rejection("--seed", "18446744073709551615"), "");
  EXPECT_EQ(sample_.seed, 18446744073709551615ULL);
}

TEST_F(OptionsTest, PortsAreOneToTheMaximumOrZeroWhereAllowed) {
  const std::string expected = "expected a port from 1 to 65535, or 0 (off)";
  EXPECT_EQ(rejection("--metrics-port", "70000"), "--metrics-port '70000': out of range; " + expected);
  EXPECT_EQ(rejection("--metrics-port", "-1"), "--metrics-port '-1': out of range; " + expected);
  EXPECT_EQ(rejection("--metrics-port", "http"), "--metrics-port 'http': not a port number; " + expected);
  EXPECT_EQ(rejection("--metrics-port", "0"), "");
  EXPECT_EQ(rejection("--metrics-port", "65535"), "");
  EXPECT_EQ(sample_.port, 65535);
}

TEST_F(OptionsTest, NumbersMustBeFiniteAndInRange) {
  for (const char* bad : {"nan", "NaN", "inf", "-inf", "1e999"}) {
    EXPECT_EQ(rejection("--lr", bad),
              "--lr '" + std::string(bad) + "': not a finite number; expected a finite number >= 0 and <= 10")
        << bad;
  }
  EXPECT_EQ(rejection("--lr", "11"), "--lr '11': out of range; expected a finite number >= 0 and <= 10");
  EXPECT_EQ(rejection("--lr", "fast"), "--lr 'fast': not a number; expected a finite number >= 0 and <= 10");
  EXPECT_EQ(rejection("--momentum", "1"), "--momentum '1': out of range; expected a finite number >= 0 and < 1");
  EXPECT_EQ(rejection("--momentum", "5"), "--momentum '5': out of range; expected a finite number >= 0 and < 1");
  EXPECT_EQ(rejection("--momentum", "0.99"), "");
  EXPECT_DOUBLE_EQ(sample_.momentum, 0.99);
  EXPECT_DOUBLE_EQ(sample_.lr, 0.1) << "a refused value leaves the field as it was";
}

TEST_F(OptionsTest, AMarkerDefaultIsAcceptedButCannotBeGiven) {
  EXPECT_NO_THROW(set_.checkAll()) << "step_epochs = 0 means 'epochs / 3'";
  EXPECT_EQ(rejection("--step-epochs", "0"), "--step-epochs '0': out of range; expected a finite number > 0");
  EXPECT_EQ(rejection("--step-epochs", "2"), "");
}

TEST_F(OptionsTest, ChoicesNameTheWordsTheyAccept) {
  EXPECT_EQ(rejection("--optimizer", "adam"), "--optimizer 'adam': unknown; expected one of sgd or adamw");
  EXPECT_EQ(rejection("--optimizer", "adamw"), "");
  EXPECT_EQ(sample_.optimizer, "adamw");
}

TEST_F(OptionsTest, PathsAreCheckedForWhatTheCommandNeeds) {
  const std::string dir = ::testing::TempDir() + "options_test_paths";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/file") << "x";
  EXPECT_EQ(rejection("--data-dir", "/nonexistent/data"),
            "--data-dir '/nonexistent/data': no such directory; expected an existing directory");
  EXPECT_EQ(rejection("--data-dir", dir + "/file"),
            "--data-dir '" + dir + "/file': a file, not a directory; expected an existing directory");
  EXPECT_EQ(rejection("--data-dir", dir), "");
  EXPECT_EQ(rejection("--resume", dir), "--resume '" + dir + "': a directory; expected an existing file");
  EXPECT_EQ(rejection("--resume", dir + "/none"), "--resume '" + dir + "/none': no such file; expected an existing file");
  EXPECT_EQ(rejection("--resume", dir + "/file"), "");
  EXPECT_EQ(rejection("--trace", "/nonexistent/dir/trace.json"),
            "--trace '/nonexistent/dir/trace.json': its directory '/nonexistent/dir' does not exist; expected a "
            "path in an existing directory");
  EXPECT_EQ(rejection("--trace", dir + "/trace.json"), "");
  EXPECT_EQ(rejection("--trace", ""), "") << "an empty path leaves the feature off";
}

TEST_F(OptionsTest, TextChecksSayWhatIsExpected) {
  EXPECT_EQ(rejection("--size", "64K"), "--size '64K': no M; expected a size in M");
  EXPECT_EQ(rejection("--size", "64M"), "");
}

TEST_F(OptionsTest, SwitchesTurnTheirFieldAwayFromTheDefault) {
  static_cast<SwitchOption*>(set_.find("--fast"))->give();
  static_cast<SwitchOption*>(set_.find("--no-graphs"))->give();
  EXPECT_TRUE(sample_.fast);
  EXPECT_FALSE(sample_.graphs);
}

TEST_F(OptionsTest, CheckAllRefusesAStructFilledInByCode) {
  sample_.momentum = 5;
  try {
    set_.checkAll();
    FAIL() << "momentum 5 passed";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.message(), "--momentum '5': out of range; expected a finite number >= 0 and < 1");
  }
  sample_.momentum = 0.5;
  sample_.lr = std::nan("");
  EXPECT_THROW(set_.checkAll(), ConfigError);
}

TEST_F(OptionsTest, ArgumentsForwardWhatDiffersFromTheDefaults) {
  EXPECT_TRUE(set_.arguments().empty());
  set_.find("--batch-size")->set("128");
  set_.find("--lr")->set("0.05");
  set_.find("--internal")->set("x");
  static_cast<SwitchOption*>(set_.find("--no-graphs"))->give();
  static_cast<SwitchOption*>(set_.find("--fast"))->give();
  const std::vector<std::string> expected = {"--batch-size", "128", "--lr", "0.05", "--fast", "--no-graphs"};
  EXPECT_EQ(set_.arguments(), expected);
  // What is forwarded reads back to the same values.
  Sample copy;
  OptionSet other("dtrain sample");
  declare(other, copy);
  const auto args = set_.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    Option* option = other.find(args[i]);
    ASSERT_NE(option, nullptr) << args[i];
    if (option->isSwitch()) {
      static_cast<SwitchOption*>(option)->give();
    } else {
      option->set(args[++i]);
    }
  }
  EXPECT_EQ(copy.batch, 128);
  EXPECT_DOUBLE_EQ(copy.lr, 0.05);
  EXPECT_TRUE(copy.fast);
  EXPECT_FALSE(copy.graphs);
}

TEST_F(OptionsTest, TheDocsTableListsEveryVisibleOption) {
  const std::string md = set_.markdown();
  EXPECT_NE(md.find("### `dtrain sample`"), std::string::npos) << md;
  EXPECT_NE(md.find("| `-b/--batch-size` | integer | `64` | an integer from 1 to 1024 | Samples per step |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| `--step-epochs` | number | `epochs / 3` | a finite number > 0 | Decay period |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| `--fast` | switch |  | no value | Go fast |"), std::string::npos) << md;
  EXPECT_EQ(md.find("--internal"), std::string::npos) << "hidden options stay out of the docs";
}

enum class Backend { kStatic, kC10d, kEtcd };

struct EnumSample {
  Backend backend = Backend::kStatic;
  Backend store = Backend::kC10d;
};

class EnumOptionTest : public ::testing::Test {
 protected:
  EnumOptionTest() : set_("dtrain enum") {
    set_.choice("--backend", sample_.backend,
                {{"static", Backend::kStatic}, {"c10d", Backend::kC10d}, {"etcd", Backend::kEtcd},
                 {"etcd-v3", Backend::kEtcd}},
                "Rendezvous backend");
    set_.choice("--store", sample_.store, {{"c10d", Backend::kC10d}, {"etcd", Backend::kEtcd}}, "Store")
        .describedAs("c10d or etcd (not static)");
  }
  std::string rejection(const std::string& name, const std::string& value) {
    return testing::configErrorOf([&] { set_.find(name)->set(value); });
  }

  EnumSample sample_;
  OptionSet set_;
};

TEST_F(EnumOptionTest, AWordIsParsedOnceIntoTheEnum) {
  EXPECT_EQ(rejection("--backend", "c10d"), "");
  EXPECT_EQ(sample_.backend, Backend::kC10d);
  EXPECT_EQ(rejection("--backend", "etcd-v3"), "") << "an alias";
  EXPECT_EQ(sample_.backend, Backend::kEtcd);
  EXPECT_EQ(set_.find("--backend")->valueText(), "etcd") << "the first word listed for the value";
}

TEST_F(EnumOptionTest, AnUnknownWordIsRefusedAndTheFieldKept) {
  EXPECT_EQ(rejection("--backend", "zookeeper"),
            "--backend 'zookeeper': unknown; expected one of static, c10d, etcd or etcd-v3");
  EXPECT_EQ(rejection("--backend", "C10D"), "--backend 'C10D': unknown; expected one of static, c10d, etcd or etcd-v3")
      << "words are matched exactly";
  EXPECT_EQ(sample_.backend, Backend::kStatic);
  EXPECT_EQ(rejection("--store", "static"), "--store 'static': unknown; expected c10d or etcd (not static)");
}

TEST_F(EnumOptionTest, DefaultsChecksArgumentsAndDocsSpeakTheWords) {
  EXPECT_EQ(set_.find("--backend")->defaultText(), "static");
  EXPECT_EQ(set_.find("--store")->defaultText(), "c10d");
  EXPECT_EQ(set_.find("--backend")->typeName(), "choice");
  EXPECT_EQ(static_cast<const EnumOption*>(set_.find("--backend"))->choices(),
            (std::vector<std::string>{"static", "c10d", "etcd", "etcd-v3"}));
  EXPECT_TRUE(set_.arguments().empty());
  sample_.backend = Backend::kEtcd;
  EXPECT_EQ(set_.arguments(), (std::vector<std::string>{"--backend", "etcd"}));
  set_.checkAll();
  sample_.store = Backend::kStatic;
  EXPECT_EQ(testing::configErrorOf([&] { set_.checkAll(); }),
            "--store '0': not one of the choices; expected c10d or etcd (not static)")
      << "a value no word of the option names is shown as its number";
  const std::string md = set_.markdown();
  EXPECT_NE(md.find("| `--backend` | choice | `static` | one of static, c10d, etcd or etcd-v3 | Rendezvous backend |"),
            std::string::npos)
      << md;
}

TEST(OptionSetTest, ANameDeclaredTwiceIsRefused) {
  int a = 0, b = 0;
  OptionSet set("dtrain twice");
  set.integer("--n", a, "first");
  EXPECT_THROW(set.integer("--n", b, "second"), ConfigError);
}

TEST(FormatNumberTest, ShortestTextThatReadsBack) {
  EXPECT_EQ(formatNumber(0.05), "0.05");
  EXPECT_EQ(formatNumber(25), "25");
  EXPECT_EQ(formatNumber(1e-8), "1e-08");
  EXPECT_EQ(std::stod(formatNumber(0.1 + 0.2)), 0.1 + 0.2);
}

}  // namespace
}  // namespace dtrain
