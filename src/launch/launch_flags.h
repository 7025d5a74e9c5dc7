// The command-line grammar of `dtrain launch` (private to launch/): torchrun's
// tokenizer and PET_<FLAG> lookup over the options declared once in
// launch_options.h, the launcher's value kind (TorchrunOption), and the
// --help text and docs table built from that declaration.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/options.h"

namespace dtrain {

// One flag's value as given, and where from, for messages: "--nnodes 3:2"
// (origin as the user spelled it) or "PET_NNODES=3:2".
struct FlagValue {
  std::string value;  // "1" for a switch given on the command line
  std::string origin;
  bool from_env = false;  // named ORIGIN=VALUE in messages (else ORIGIN VALUE)
  std::string where() const { return origin + (from_env ? "=" : " ") + value; }
  // Throws ConfigError("<where>: <expected>").
  [[noreturn]] void fail(const std::string& expected) const;
  // The value as an integer in [min, max], else fail(expected).
  int toInt(int min, int max, const std::string& expected) const;
  // Seconds (fractions allowed) > 0, or >= 0 with allow_zero.
  std::chrono::milliseconds toSeconds(bool allow_zero) const;
  // 1/0, true/false, yes/no, on/off, t/f, y/n.
  bool toBool() const;
  // A switch: true when given on the command line, toBool() from PET_.
  bool toSwitch() const { return from_env ? toBool() : true; }
};

// "a,b" -> {"a", "b"}; "" -> {""}.
std::vector<std::string> splitList(const std::string& text, char separator);

// The launcher's value kind: `give` parses a value (and where it came from)
// into the command's fields and refuses it with FlagValue::fail, so every
// message names the flag as spelled or the PET_ variable ("--nnodes 3:2:
// MIN must not exceed MAX"). The declared default is given at declaration,
// so the fields start from it. typeName() is the value's form ("MIN:MAX").
class TorchrunOption : public OptionBuilder<TorchrunOption> {
 public:
  using Give = std::function<void(const FlagValue&)>;
  TorchrunOption(std::string names, std::string metavar, std::string default_text, std::string accepted,
                 std::string help, Give give);
  std::string typeName() const override { return metavar_; }
  std::string accepted() const override { return accepted_; }
  std::string valueText() const override { return text_; }
  // As if given on the command line under the option's long name.
  void set(const std::string& text) override;
  // Values are checked when given; nothing but give() fills the fields.
  void check() const override {}
  void give(const FlagValue& value);

 private:
  std::string metavar_, accepted_, text_;
  Give give_;
};

struct LaunchArgs {
  std::map<std::string, FlagValue> values;  // by long name without "--": "nproc-per-node"
  size_t script_index = 0;                  // == args.size(): no script
  bool help = false;                        // -h/--help came before the script
};

// Reads the flags declared in `flags` up to the first token that is not
// one, or "--"; that token is the script, and it and everything after it
// belong to the worker. Accepts --flag value, --flag=value, underscore
// spellings, unambiguous prefixes (as argparse does), and -r3 / -r=3 / -r 3
// for short flags. A repeated flag: the last one wins. ConfigError for an
// unknown or ambiguous flag, a missing value, or a value given to a switch.
// Values are only collected here; giveValues() parses them.
LaunchArgs readLaunchArgs(const OptionSet& flags, const std::vector<std::string>& args);

// "nproc-per-node" -> "PET_NPROC_PER_NODE".
std::string petVariable(const std::string& flag);

// Adds PET_<FLAG> values (set and non-empty) for flags `args` lacks.
void addPetValues(const OptionSet& flags, LaunchArgs& args, const std::map<std::string, std::string>& env);

// Gives every value of `args` to its option, in the order the options are
// declared. A refusal names where the value came from: the launcher's
// kinds say what they expected; the common kinds (switches, enum choices)
// "<where>: expected <what the option accepts>".
void giveValues(const OptionSet& flags, const LaunchArgs& args);

// The options of `dtrain launch` as Markdown for docs/settings.md, from
// their declaration, with the spellings and PET_ variables they also take.
std::string launchFlagsMarkdown();

}  // namespace dtrain
