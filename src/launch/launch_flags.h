// The command-line grammar of `dtrain launch` (private to launch/): torchrun's
// flag table, the tokenizer, PET_<FLAG> lookup, and the help text built from
// the same table, so --help never drifts from what is parsed.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace dtrain {

struct LaunchFlag {
  const char* name;          // canonical, dashed, without "--": "nproc-per-node"
  char short_name;           // 'r' for -r, 0 for none
  const char* metavar;       // nullptr: a switch, no value
  const char* default_text;  // for --help
  const char* help;
};

extern const std::vector<LaunchFlag> kLaunchFlags;

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
// Without leading and trailing blanks.
std::string trimmed(const std::string& text);

struct LaunchArgs {
  std::map<std::string, FlagValue> values;  // by canonical name
  size_t script_index = 0;                  // == args.size(): no script
  bool help = false;                        // -h/--help came before the script
};

// Reads flags up to the first token that is not one, or "--"; that token is
// the script, and it and everything after it belong to the worker. Accepts
// --flag value, --flag=value, underscore spellings, unambiguous prefixes (as
// argparse does), and -r3 / -r=3 / -r 3 for short flags. A repeated flag: the
// last one wins. ConfigError for an unknown or ambiguous flag, a missing
// value, or a value given to a switch.
LaunchArgs readLaunchArgs(const std::vector<std::string>& args);

// "nproc-per-node" -> "PET_NPROC_PER_NODE".
std::string petVariable(const std::string& flag);

// The flag table as Markdown for docs/settings.md (torchrun's grammar, so
// not a common/options.h OptionSet; the table is still its one declaration).
std::string launchFlagsMarkdown();

// Adds PET_<FLAG> values (set and non-empty) for flags `args` lacks.
void addPetValues(LaunchArgs& args, const std::map<std::string, std::string>& env);

}  // namespace dtrain
