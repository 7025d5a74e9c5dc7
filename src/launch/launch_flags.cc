#include "launch/launch_flags.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <optional>

#include "common/error.h"
#include "common/settings.h"
#include "common/text.h"
#include "launch/launch_config.h"
#include "launch/launch_options.h"

namespace dtrain {

void FlagValue::fail(const std::string& expected) const { throw ConfigError(where() + ": " + expected); }

int FlagValue::toInt(int min, int max, const std::string& expected) const {
  int64_t number = 0;
  try {
    number = parseInt64(trimmed(value), origin);
  } catch (const ConfigError&) {
    fail(expected);
  }
  if (number < min || number > max) fail(expected);
  return static_cast<int>(number);
}

std::chrono::milliseconds FlagValue::toSeconds(bool allow_zero) const {
  const std::string expected = std::string("expected a number of seconds ") + (allow_zero ? ">= 0" : "> 0");
  double seconds = 0;
  try {
    seconds = parseDouble(trimmed(value), origin);
  } catch (const ConfigError&) {
    fail(expected);
  }
  if (!std::isfinite(seconds) || seconds < 0 || (!allow_zero && seconds == 0) || seconds > 1e9) fail(expected);
  return std::chrono::milliseconds(std::llround(seconds * 1000));
}

bool FlagValue::toBool() const {
  std::string text = trimmed(value);
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (text == "t" || text == "y") return true;
  if (text == "f" || text == "n") return false;
  try {
    return parseBool(text, origin);
  } catch (const ConfigError&) {
    fail("expected 1 or 0 (true/false, yes/no)");
  }
}

std::vector<std::string> splitList(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t pos; (pos = text.find(separator, start)) != std::string::npos; start = pos + 1) {
    parts.push_back(text.substr(start, pos - start));
  }
  parts.push_back(text.substr(start));
  return parts;
}

TorchrunOption::TorchrunOption(std::string names, std::string metavar, std::string default_text,
                               std::string accepted, std::string help, Give give)
    : OptionBuilder<TorchrunOption>(std::move(names), std::move(help)),
      metavar_(std::move(metavar)),
      accepted_(std::move(accepted)),
      give_(std::move(give)) {
  set(default_text);
}

void TorchrunOption::set(const std::string& text) { give(FlagValue{text, longName(), false}); }

void TorchrunOption::give(const FlagValue& value) {
  give_(value);
  text_ = value.value;
}

namespace {

// The long name without "--": "nproc-per-node".
std::string flagName(const Option& option) { return option.longName().substr(2); }

// The one-letter name ("-r"), or "" for none.
std::string shortName(const Option& option) {
  for (const std::string& name : splitList(option.names(), ',')) {
    if (name.size() == 2 && name[0] == '-') return name;
  }
  return "";
}

// How --help and messages show the value: "MIN:MAX", "{static,c10d,...}".
std::string metavarOf(const Option& option) {
  if (const auto* words = dynamic_cast<const EnumOption*>(&option)) {
    std::string text;
    for (const std::string& word : words->choices()) text += (text.empty() ? "{" : ",") + word;
    return text + "}";
  }
  std::string text = option.typeName();
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

const Option* findLongFlag(const OptionSet& flags, const std::string& spelled) {
  std::string want = spelled;
  for (char& c : want) c = c == '_' ? '-' : c;
  if (want.empty()) return nullptr;
  for (const auto& option : flags.options()) {
    if (want == flagName(*option)) return option.get();
  }
  std::vector<const Option*> matches;
  for (const auto& option : flags.options()) {
    if (flagName(*option).rfind(want, 0) == 0) matches.push_back(option.get());
  }
  if (matches.size() > 1) {
    std::string names;
    for (const Option* option : matches) names += (names.empty() ? "" : ", ") + option->longName();
    throw ConfigError("ambiguous option --" + spelled + " could match " + names);
  }
  return matches.empty() ? nullptr : matches[0];
}

bool isNegativeNumber(const std::string& s) {
  return s.size() > 1 && s[0] == '-' && (std::isdigit(static_cast<unsigned char>(s[1])) || s[1] == '.');
}

// What argparse takes for an option rather than a value or the script.
bool isFlagToken(const std::string& s) { return s.size() > 1 && s[0] == '-' && !isNegativeNumber(s); }

// One flag token (and its value): which option, as spelled, and the value.
struct FlagToken {
  const Option* option = nullptr;
  std::string spelled;
  std::optional<std::string> inline_value;
};

FlagToken readFlagToken(const OptionSet& flags, const std::string& token) {
  FlagToken read;
  if (token[1] == '-') {
    size_t eq = token.find('=');
    read.spelled = token.substr(0, eq);
    if (eq != std::string::npos) read.inline_value = token.substr(eq + 1);
    read.option = findLongFlag(flags, read.spelled.substr(2));
  } else {
    read.spelled = token.substr(0, 2);
    read.option = flags.find(read.spelled);
    if (read.option != nullptr && token.size() > 2) {
      if (read.option->isSwitch()) {
        throw ConfigError("unrecognized argument " + token + " (" + read.spelled + " takes no value)");
      }
      read.inline_value = token.substr(token[2] == '=' ? 3 : 2);
    }
  }
  if (read.option == nullptr) {
    throw ConfigError("unrecognized argument " + read.spelled + " (dtrain launch --help lists the flags)");
  }
  return read;
}

// Parses `value` into `option`; a refusal names where the value came from.
void giveValue(Option& option, const FlagValue& value) {
  if (auto* torchrun = dynamic_cast<TorchrunOption*>(&option)) return torchrun->give(value);
  if (option.isSwitch()) return option.set(value.toSwitch() ? "true" : "false");
  try {
    option.set(value.value);
  } catch (const ConfigError&) {
    value.fail("expected " + option.accepted());
  }
}

}  // namespace

LaunchArgs readLaunchArgs(const OptionSet& flags, const std::vector<std::string>& args) {
  LaunchArgs parsed;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& token = args[i];
    if (token == "--") {
      ++i;
      break;
    }
    if (!isFlagToken(token)) break;
    if (token == "-h" || token == "--help") {
      parsed.help = true;
      return parsed;
    }
    const FlagToken read = readFlagToken(flags, token);
    FlagValue value{"1", read.spelled, false};
    if (read.option->isSwitch()) {
      if (read.inline_value) throw ConfigError(read.spelled + " takes no value (got '" + *read.inline_value + "')");
    } else if (read.inline_value) {
      value.value = *read.inline_value;
    } else if (i + 1 < args.size() && !isFlagToken(args[i + 1])) {
      value.value = args[++i];
    } else {
      throw ConfigError(read.spelled + " expects a value: " + read.spelled + " " + metavarOf(*read.option));
    }
    parsed.values[flagName(*read.option)] = value;
  }
  parsed.script_index = i;
  return parsed;
}

std::string petVariable(const std::string& flag) {
  std::string name = "PET_";
  for (char c : flag) name += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

void addPetValues(const OptionSet& flags, LaunchArgs& args, const std::map<std::string, std::string>& env) {
  for (const auto& option : flags.options()) {
    const std::string name = flagName(*option);
    if (args.values.count(name)) continue;
    auto it = env.find(petVariable(name));
    if (it != env.end() && !it->second.empty()) args.values[name] = FlagValue{it->second, it->first, true};
  }
}

void giveValues(const OptionSet& flags, const LaunchArgs& args) {
  for (const auto& option : flags.options()) {
    auto it = args.values.find(flagName(*option));
    if (it != args.values.end()) giveValue(*option, it->second);
  }
}

std::string launchFlagsMarkdown() {
  LaunchFlags flags;
  return flags.set.markdown() +
         "\nEvery option may also be spelled with underscores (`--nproc_per_node`), shortened to an unambiguous "
         "prefix, or given as a `PET_<OPTION>` environment variable (`PET_NPROC_PER_NODE=4`), as under "
         "torchrun.\n";
}

namespace {

// One option's --help entry, in argparse's layout: the names and value from
// column 2, the help (and default) from column 24, wrapped at 80.
std::string usageEntry(const Option& option) {
  constexpr size_t kHelpColumn = 24, kWidth = 80;
  std::string line = "  ";
  if (const std::string letter = shortName(option); !letter.empty()) line += letter + ", ";
  line += option.longName();
  if (!option.isSwitch()) line += " " + metavarOf(option);
  line += line.size() + 2 <= kHelpColumn ? std::string(kHelpColumn - line.size(), ' ')
                                         : "\n" + std::string(kHelpColumn, ' ');
  std::string help = option.help();
  if (!option.isSwitch() && !option.defaultShown().empty()) help += " (default: " + option.defaultShown() + ")";
  size_t column = kHelpColumn;
  for (const std::string& word : splitList(help, ' ')) {
    if (column > kHelpColumn && column + 1 + word.size() > kWidth) {
      line += "\n" + std::string(kHelpColumn, ' ');
      column = kHelpColumn;
    }
    if (column > kHelpColumn) {
      line += ' ';
      ++column;
    }
    line += word;
    column += word.size();
  }
  return line + "\n";
}

}  // namespace

std::string launchUsage() {
  std::string text =
      "usage: dtrain launch [options] training_script [training_script_args ...]\n"
      "\n"
      "Starts the workers of this node and restarts them after a failure; a drop-in\n"
      "for torchrun. Each flag may be spelled with underscores (--nproc_per_node) and\n"
      "given as --flag VALUE or --flag=VALUE, or as a PET_<FLAG> environment variable\n"
      "(PET_NPROC_PER_NODE=4). A flag wins over its PET_ variable, which wins over\n"
      "Slurm's environment (under srun: nodes, node rank, node 0, GPUs, job id),\n"
      "which wins over the default.\n"
      "\n"
      "positional arguments:\n"
      "  training_script       the program each worker runs (a module with -m)\n"
      "  training_script_args  its arguments, passed as given (also after --)\n"
      "\n"
      "options:\n"
      "  -h, --help            show this help message and exit\n";
  LaunchFlags flags;
  for (const auto& option : flags.set.options()) {
    if (!option->hidden()) text += usageEntry(*option);
  }
  return text;
}

}  // namespace dtrain
