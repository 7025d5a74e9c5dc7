#include "launch/launch_flags.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <optional>

#include "common/error.h"
#include "common/settings.h"
#include "launch/launch_config.h"

namespace dtrain {

// torchrun's flags (torch/distributed/run.py, torch 2.x) and dtrain's three
// additions (signals-to-handle, shutdown-timeout, exit-barrier-timeout).
const std::vector<LaunchFlag> kLaunchFlags = {
    {"nnodes", 0, "MIN:MAX", "1:1", "number of nodes, or the range MIN:MAX of an elastic job"},
    {"nproc-per-node", 0, "N", "1", "workers on this node: a number, gpu, cpu, or auto (GPUs, else CPUs)"},
    {"node-rank", 0, "RANK", "0", "this node's rank (static rendezvous)"},
    {"master-addr", 0, "ADDR", "127.0.0.1", "address of node 0, which hosts the store (static rendezvous)"},
    {"master-port", 0, "PORT", "29500",
     "the workers' MASTER_PORT on node 0 (static rendezvous); the agents' store takes the next port when there "
     "are several nodes"},
    {"local-addr", 0, "ADDR", "", "this node's address as the other nodes reach it (default: found)"},
    {"rdzv-backend", 0, "BACKEND", "static",
     "rendezvous backend: static, c10d (an agent hosts the store), or etcd (alias etcd-v3: the store is an etcd "
     "cluster, so the job survives losing any one node)"},
    {"rdzv-endpoint", 0, "HOST[:PORT]", "",
     "c10d rendezvous store, [IPv6] in brackets, port 29400 by default; etcd: the members, HOST:PORT[,HOST:PORT...], "
     "port 2379 by default"},
    {"rdzv-id", 0, "ID", "none",
     "run id shared by every node of the job; without it, Slurm's job id, or a fresh job-<time>-<pid> for a "
     "single node"},
    {"rdzv-conf", 0, "KEY=VALUE,...", "",
     "join_timeout, last_call_timeout, close_timeout, keep_alive_interval (seconds), "
     "keep_alive_max_attempt, is_host"},
    {"standalone", 0, nullptr, "", "one node: c10d rendezvous on 127.0.0.1, a free port, a fresh run id"},
    {"max-restarts", 0, "N", "0", "times the worker group is restarted after a failure"},
    {"monitor-interval", 0, "SECONDS", "0.1", "seconds between checks of the workers"},
    {"start-method", 0, "METHOD", "spawn", "spawn, fork or forkserver: accepted, workers are always exec'd"},
    {"role", 0, "ROLE", "default", "the workers' role name"},
    {"module", 'm', nullptr, "", "run the script as a Python module (python -u -m MODULE)"},
    {"no-python", 0, nullptr, "", "run the script as an executable, without python"},
    {"run-path", 0, nullptr, "", "accepted; the script runs as python -u SCRIPT, as by default"},
    {"log-dir", 0, "DIR", "",
     "directory for the workers' log files, in a folder <run-id>_<random> of each run's own (default: a new one "
     "under $TMPDIR)"},
    {"redirects", 'r', "STD", "0",
     "streams to log files only: 0 none, 1 stdout, 2 stderr, 3 both, or per local rank 0:1,1:2"},
    {"tee", 't', "STD", "0", "streams to log files and the console, as --redirects"},
    {"local-ranks-filter", 0, "RANKS", "", "show only these local ranks on the console: 0,2"},
    {"log-line-prefix-template", 0, "TEMPLATE", "",
     "console line prefix from ${rank} ${local_rank} ${role_name} ${host}"},
    {"signals-to-handle", 0, "SIGNALS", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2",
     "signals the agent catches and forwards to the workers before it stops them"},
    {"shutdown-timeout", 0, "SECONDS", "30", "seconds between SIGTERM and SIGKILL when stopping workers"},
    {"exit-barrier-timeout", 0, "SECONDS", "300", "seconds a node whose workers finished waits for the others"},
};

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

std::string trimmed(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\n\r");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\n\r") - begin + 1);
}

namespace {

const LaunchFlag* findLongFlag(const std::string& spelled) {
  std::string want = spelled;
  for (char& c : want) c = c == '_' ? '-' : c;
  if (want.empty()) return nullptr;
  for (const LaunchFlag& f : kLaunchFlags) {
    if (want == f.name) return &f;
  }
  std::vector<const LaunchFlag*> matches;
  for (const LaunchFlag& f : kLaunchFlags) {
    if (std::string(f.name).rfind(want, 0) == 0) matches.push_back(&f);
  }
  if (matches.size() > 1) {
    std::string names;
    for (const LaunchFlag* f : matches) names += std::string(names.empty() ? "" : ", ") + "--" + f->name;
    throw ConfigError("ambiguous option --" + spelled + " could match " + names);
  }
  return matches.empty() ? nullptr : matches[0];
}

bool isNegativeNumber(const std::string& s) {
  return s.size() > 1 && s[0] == '-' && (std::isdigit(static_cast<unsigned char>(s[1])) || s[1] == '.');
}

// What argparse takes for an option rather than a value or the script.
bool isFlagToken(const std::string& s) { return s.size() > 1 && s[0] == '-' && !isNegativeNumber(s); }

}  // namespace

LaunchArgs readLaunchArgs(const std::vector<std::string>& args) {
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
    const LaunchFlag* flag = nullptr;
    std::string spelled;
    std::optional<std::string> inline_value;
    if (token[1] == '-') {
      size_t eq = token.find('=');
      spelled = token.substr(0, eq);
      if (eq != std::string::npos) inline_value = token.substr(eq + 1);
      flag = findLongFlag(spelled.substr(2));
    } else {
      spelled = token.substr(0, 2);
      for (const LaunchFlag& f : kLaunchFlags) {
        if (f.short_name == token[1]) flag = &f;
      }
      if (flag != nullptr && token.size() > 2) {
        if (flag->metavar == nullptr) throw ConfigError("unrecognized argument " + token + " (" + spelled + " takes no value)");
        inline_value = token.substr(token[2] == '=' ? 3 : 2);
      }
    }
    if (flag == nullptr) {
      throw ConfigError("unrecognized argument " + spelled + " (dtrain launch --help lists the flags)");
    }
    FlagValue value{"1", spelled, false};
    if (flag->metavar == nullptr) {
      if (inline_value) throw ConfigError(spelled + " takes no value (got '" + *inline_value + "')");
    } else if (inline_value) {
      value.value = *inline_value;
    } else if (i + 1 < args.size() && !isFlagToken(args[i + 1])) {
      value.value = args[++i];
    } else {
      throw ConfigError(spelled + " expects a value: " + spelled + " " + flag->metavar);
    }
    parsed.values[flag->name] = value;
  }
  parsed.script_index = i;
  return parsed;
}

std::string petVariable(const std::string& flag) {
  std::string name = "PET_";
  for (char c : flag) name += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

void addPetValues(LaunchArgs& args, const std::map<std::string, std::string>& env) {
  for (const LaunchFlag& f : kLaunchFlags) {
    if (args.values.count(f.name)) continue;
    auto it = env.find(petVariable(f.name));
    if (it != env.end() && !it->second.empty()) args.values[f.name] = FlagValue{it->second, it->first, true};
  }
}

std::string launchFlagsMarkdown() {
  std::string text = "### `dtrain launch`\n\n| option | value | default | meaning |\n|---|---|---|---|\n";
  for (const LaunchFlag& f : kLaunchFlags) {
    std::string names = f.short_name != 0 ? std::string("-") + f.short_name + "/--" + f.name : std::string("--") + f.name;
    text += "| `" + names + "` | " + (f.metavar != nullptr ? f.metavar : "(switch)") + " | " +
            (f.default_text[0] != '\0' ? "`" + std::string(f.default_text) + "`" : "") + " | " + f.help +
            " (also `" + petVariable(f.name) + "`) |\n";
  }
  return text;
}

std::string launchUsage() {
  std::string text =
      "usage: dtrain launch [options] training_script [training_script_args ...]\n"
      "\n"
      "Starts the workers of this node and restarts them after a failure; a drop-in\n"
      "for torchrun. "
"Each flag may be spelled with underscores (--nproc_per_node) and\n"
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
  constexpr size_t kHelpColumn = 24, kWidth = 80;  // argparse's layout
  for (const LaunchFlag& f : kLaunchFlags) {
    std::string line = "  ";
    if (f.short_name != 0) line += std::string("-") + f.short_name + ", ";
    line += std::string("--") + f.name;
    if (f.metavar != nullptr) line += std::string(" ") + f.metavar;
    line += line.size() + 2 <= kHelpColumn ? std::string(kHelpColumn - line.size(), ' ')
                                           : "\n" + std::string(kHelpColumn, ' ');
    std::string help = f.help;
    if (f.default_text[0] != '\0') help += std::string(" (default: ") + f.default_text + ")";
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
    text += line + "\n";
  }
  return text;
}

}  // namespace dtrain
