// The declaration of `dtrain launch`'s options and the parsers of their
// values, after torchrun (torch/distributed/run.py, torch 2.x). Each message
// names the flag or PET_ variable as given, the value, and what was expected.
#include "launch/launch_options.h"

#include <signal.h>

#include <algorithm>
#include <cctype>

#include "common/error.h"
#include "common/files.h"
#include "launch/launch_flags.h"

namespace dtrain {
namespace {

using Give = TorchrunOption::Give;
using std::chrono::milliseconds;

const std::string kCount = "expected an integer >= 0";
const std::string kStreams = "0 (none), 1 (stdout), 2 (stderr) or 3 (both), or per local rank like 0:1,1:2";

// "N" or "MIN:MAX" (torchrun's parse_min_max_nnodes).
void parseNodes(const FlagValue& raw, RendezvousConfig& rdzv) {
  const std::string expected = "expected N or MIN:MAX, positive integers";
  std::vector<std::string> parts = splitList(raw.value, ':');
  if (parts.size() > 2) raw.fail(expected);
  FlagValue lo = raw, hi = raw;
  lo.value = parts[0];
  hi.value = parts.back();
  rdzv.min_nodes = lo.toInt(1, 1'000'000, expected);
  rdzv.max_nodes = hi.toInt(1, 1'000'000, expected);
  if (rdzv.min_nodes > rdzv.max_nodes) raw.fail("MIN must not exceed MAX");
}

// torchrun's determine_local_world_size: a number, or a word counted once
// the environment is known (gpu, cpu, auto).
void parseNproc(const FlagValue& raw, LaunchFlagValues& values) {
  static const std::pair<const char*, WorkerCount> kWords[] = {
      {"gpu", WorkerCount::kGpus}, {"cpu", WorkerCount::kCpus}, {"auto", WorkerCount::kAuto}};
  for (const auto& [word, count] : kWords) {
    if (raw.value == word) {
      values.worker_count = count;
      return;
    }
  }
  values.worker_count = WorkerCount::kNumber;
  values.config.nproc_per_node = raw.toInt(1, 1'000'000, "expected a positive integer, auto, gpu or cpu");
}

// One --rdzv-conf key. Named in messages as "--rdzv-conf join_timeout=0".
void parseRdzvConfKey(const std::string& key, const FlagValue& value, RendezvousConfig& rdzv) {
  if (key == "join_timeout" || key == "timeout") {
    rdzv.join_timeout = value.toSeconds(false);
  } else if (key == "last_call_timeout") {
    rdzv.last_call_timeout = value.toSeconds(true);
  } else if (key == "close_timeout") {
    rdzv.close_timeout = value.toSeconds(false);
  } else if (key == "keep_alive_interval") {
    rdzv.keep_alive_interval = value.toSeconds(false);
  } else if (key == "keep_alive_max_attempt") {
    rdzv.keep_alive_max_attempt = value.toInt(1, 1'000'000, "expected an integer >= 1");
  } else if (key == "is_host") {
    rdzv.is_host = value.toBool() ? 1 : 0;
  } else if (key == "read_timeout") {
    value.toSeconds(false);
  } else if (key == "use_libuv") {
    value.toBool();
  }
}

// torchrun's --rdzv-conf keys that dtrain reads; read_timeout and use_libuv
// (c10d store tuning) are accepted and have no effect.
void parseRdzvConf(const FlagValue& raw, RendezvousConfig& rdzv) {
  static const std::vector<std::string> kKnown = {
      "join_timeout",           "last_call_timeout", "close_timeout", "timeout",  "keep_alive_interval",
      "keep_alive_max_attempt", "is_host",           "read_timeout",  "use_libuv"};
  if (trimmed(raw.value).empty()) return;
  for (const std::string& item : splitList(raw.value, ',')) {
    size_t eq = item.find('=');
    const std::string key = trimmed(item.substr(0, eq));
    FlagValue value{eq == std::string::npos ? "" : trimmed(item.substr(eq + 1)), raw.origin + " " + key, true};
    if (key.empty()) raw.fail("expected KEY=VALUE,KEY=VALUE");
    if (value.value.empty()) raw.fail("the option '" + key + "' needs a value (KEY=VALUE)");
    if (std::find(kKnown.begin(), kKnown.end(), key) == kKnown.end()) {
      std::string known;
      for (const std::string& name : kKnown) known += (known.empty() ? "" : ", ") + name;
      raw.fail("unknown option '" + key + "'; known: " + known);
    }
    parseRdzvConfKey(key, value, rdzv);
  }
}

StreamChoice parseStreams(const FlagValue& raw) {
  const std::string expected = "expected " + kStreams;
  auto level = [&](const std::string& s) {
    if (s.size() != 1 || s[0] < '0' || s[0] > '3') raw.fail(expected);
    return static_cast<StreamSet>(s[0] - '0');
  };
  StreamChoice choice;
  if (raw.value.find(':') == std::string::npos) {
    choice.all = level(raw.value);
    return choice;
  }
  for (const std::string& item : splitList(raw.value, ',')) {
    size_t colon = item.find(':');
    if (colon == std::string::npos || colon == 0 ||
        item.find_first_not_of("0123456789") != colon || colon > 6) {
      raw.fail(expected);
    }
    choice.ranks[std::stoi(item.substr(0, colon))] = level(item.substr(colon + 1));
  }
  return choice;
}

std::optional<std::set<int>> parseRanksFilter(const FlagValue& raw) {
  if (trimmed(raw.value).empty()) return std::nullopt;
  std::set<int> ranks;
  for (const std::string& item : splitList(raw.value, ',')) {
    FlagValue one = raw;
    one.value = trimmed(item);
    try {
      ranks.insert(one.toInt(0, 1'000'000, ""));
    } catch (const ConfigError&) {
      raw.fail("expected a comma-separated list of local ranks, like 0,1,2");
    }
  }
  return ranks;
}

// Names with or without SIG, any case ("SIGTERM", "usr1"), or numbers.
std::vector<int> parseSignals(const FlagValue& raw) {
  static const std::pair<const char*, int> kNames[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},     {"QUIT", SIGQUIT}, {"ILL", SIGILL},   {"TRAP", SIGTRAP},
      {"ABRT", SIGABRT}, {"BUS", SIGBUS},     {"FPE", SIGFPE},   {"KILL", SIGKILL}, {"USR1", SIGUSR1},
      {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},   {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM},
      {"CHLD", SIGCHLD}, {"CONT", SIGCONT},   {"STOP", SIGSTOP}, {"TSTP", SIGTSTP}, {"TTIN", SIGTTIN},
      {"TTOU", SIGTTOU}, {"URG", SIGURG},     {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ}, {"VTALRM", SIGVTALRM},
      {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"IO", SIGIO},     {"SYS", SIGSYS}};
  std::vector<int> signals;
  for (const std::string& item : splitList(raw.value, ',')) {
    const std::string given = trimmed(item);
    std::string name = given;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::toupper(c); });
    if (name.rfind("SIG", 0) == 0) name = name.substr(3);
    int sig = 0;
    for (const auto& [known, number] : kNames) sig = name == known ? number : sig;
    if (sig == 0 && !name.empty() && name.find_first_not_of("0123456789") == std::string::npos &&
        name.size() < 4 && std::stoi(name) >= 1 && std::stoi(name) <= SIGRTMAX) {
      sig = std::stoi(name);
    }
    if (sig == 0) raw.fail("unknown signal '" + given + "'; expected names like SIGTERM,SIGUSR1");
    if (sig == SIGKILL || sig == SIGSTOP) raw.fail(given + " cannot be caught");
    if (std::find(signals.begin(), signals.end(), sig) == signals.end()) signals.push_back(sig);
  }
  return signals;
}

// The common shapes of a value's parse, as TorchrunOption::Give.
Give text(std::string& field) {
  return [&field](const FlagValue& v) { field = v.value; };
}
Give nonEmpty(std::string& field, std::string expected) {
  return [&field, expected](const FlagValue& v) {
    if (trimmed(v.value).empty()) v.fail(expected);
    field = v.value;
  };
}
Give integer(int& field, int min, int max, std::string expected) {
  return [&field, min, max, expected](const FlagValue& v) { field = v.toInt(min, max, expected); };
}
Give seconds(milliseconds& field, bool allow_zero) {
  return [&field, allow_zero](const FlagValue& v) { field = v.toSeconds(allow_zero); };
}

TorchrunOption& value(OptionSet& set, std::string names, std::string metavar, std::string default_text,
                      std::string accepted, std::string help, Give give) {
  return set.declare<TorchrunOption>(std::move(names), std::move(metavar), std::move(default_text),
                                     std::move(accepted), std::move(help), std::move(give));
}

// Nodes, this node's place among them, and the rendezvous.
void declareNodeFlags(OptionSet& set, LaunchFlagValues& values) {
  LaunchConfig& config = values.config;
  RendezvousConfig& rdzv = config.rendezvous;
  value(set, "--nnodes", "MIN:MAX", "1:1", "N or MIN:MAX, positive integers",
        "number of nodes, or the range MIN:MAX of an elastic job",
        [&rdzv](const FlagValue& v) { parseNodes(v, rdzv); });
  value(set, "--nproc-per-node", "N", "1", "a positive integer, auto, gpu or cpu",
        "workers on this node: a number, gpu, cpu, or auto (GPUs, else CPUs)",
        [&values](const FlagValue& v) { parseNproc(v, values); });
  value(set, "--node-rank", "RANK", "0", "an integer >= 0", "this node's rank (static rendezvous)",
        integer(rdzv.node_rank, 0, 1'000'000, kCount));
  value(set, "--master-addr", "ADDR", "127.0.0.1", "a host name or address",
        "address of node 0, which hosts the store (static rendezvous)",
        nonEmpty(config.master_addr, "expected a host name or address"));
  value(set, "--master-port", "PORT", "29500", "a port 1-65535",
        "the workers' MASTER_PORT on node 0 (static rendezvous); the agents' store takes the next port when "
        "there are several nodes",
        integer(config.master_port, 1, 65535, "expected a port 1-65535"));
  value(set, "--local-addr", "ADDR", "", "a host name or address",
        "this node's address as the other nodes reach it (default: found)", text(rdzv.local_address));
  set.choice("--rdzv-backend", rdzv.backend,
             {{"static", RendezvousBackend::kStatic},
              {"c10d", RendezvousBackend::kC10d},
              {"etcd", RendezvousBackend::kEtcd},
              {"etcd-v3", RendezvousBackend::kEtcd}},
             "rendezvous backend: static, c10d (an agent hosts the store), or etcd (alias etcd-v3: the store is "
             "an etcd cluster, so the job survives losing any one node)")
      .describedAs("static, c10d or etcd (alias etcd-v3; etcd-v2 is not supported)");
  value(set, "--rdzv-endpoint", "HOST[:PORT]", "", "HOST[:PORT], [IPV6][:PORT]; etcd: HOST:PORT[,HOST:PORT...]",
        "c10d rendezvous store, [IPv6] in brackets, port 29400 by default; etcd: the members, "
        "HOST:PORT[,HOST:PORT...], port 2379 by default",
        text(values.rdzv_endpoint));
  value(set, "--rdzv-id", "ID", "none", "a run id",
        "run id shared by every node of the job; without it, Slurm's job id, or a fresh job-<time>-<pid> for a "
        "single node",
        nonEmpty(rdzv.run_id, "expected a run id"));
  value(set, "--rdzv-conf", "KEY=VALUE,...", "", "KEY=VALUE pairs separated by commas",
        "join_timeout, last_call_timeout, close_timeout, keep_alive_interval (seconds, default 2; torchrun's 5), "
        "keep_alive_max_attempt (default 3), is_host",
        [&rdzv](const FlagValue& v) { parseRdzvConf(v, rdzv); });
  set.toggle("--standalone", config.standalone,
             "one node: c10d rendezvous on 127.0.0.1, a free port, a fresh run id");
}

// The workers: how many restarts, how they are watched and run.
void declareWorkerFlags(OptionSet& set, LaunchFlagValues& values) {
  LaunchConfig& config = values.config;
  value(set, "--max-restarts", "N", "0", "an integer >= 0", "times the worker group is restarted after a failure",
        integer(config.max_restarts, 0, 1'000'000, kCount));
  value(set, "--monitor-interval", "SECONDS", "0.1", "a number of seconds > 0",
        "seconds between checks of the workers", seconds(config.monitor_interval, false));
  set.choice("--start-method", values.start_method,
             {{"spawn", StartMethod::kSpawn}, {"fork", StartMethod::kFork}, {"forkserver", StartMethod::kForkserver}},
             "spawn, fork or forkserver: accepted, workers are always exec'd")
      .describedAs("spawn, fork or forkserver");
  value(set, "--role", "ROLE", "default", "a role name", "the workers' role name",
        nonEmpty(config.role, "expected a role name"));
  set.toggle("-m,--module", values.module, "run the script as a Python module (python -u -m MODULE)");
  set.toggle("--no-python", values.no_python, "run the script as an executable, without python");
  set.toggle("--run-path", values.run_path, "accepted; the script runs as python -u SCRIPT, as by default");
}

// The workers' logs and the console.
void declareLogFlags(OptionSet& set, LaunchFlagValues& values) {
  LaunchConfig& config = values.config;
  value(set, "--log-dir", "DIR", "", "a directory (created if missing)",
        "directory for the workers' log files, in a folder <run-id>_<random> of each run's own (default: a new "
        "one under $TMPDIR)",
        [&config](const FlagValue& v) {
          if (const std::string blocker = directoryBlocker(v.value); !v.value.empty() && !blocker.empty()) {
            v.fail(blocker + "; expected a directory (created if missing)");
          }
          config.log_dir = v.value;
        });
  value(set, "-r,--redirects", "STD", "0", kStreams,
        "streams to log files only: 0 none, 1 stdout, 2 stderr, 3 both, or per local rank 0:1,1:2",
        [&values](const FlagValue& v) { values.redirects = parseStreams(v); });
  value(set, "-t,--tee", "STD", "0", kStreams, "streams to log files and the console, as --redirects",
        [&values](const FlagValue& v) { values.tees = parseStreams(v); });
  value(set, "--local-ranks-filter", "RANKS", "", "a comma-separated list of local ranks",
        "show only these local ranks on the console: 0,2",
        [&config](const FlagValue& v) { config.local_ranks_filter = parseRanksFilter(v); });
  value(set, "--log-line-prefix-template", "TEMPLATE", "", "any text",
        "console line prefix from ${rank} ${local_rank} ${role_name} ${host}",
        text(config.log_line_prefix_template));
}

// Signals and the ends of a run.
void declareStopFlags(OptionSet& set, LaunchConfig& config) {
  value(set, "--signals-to-handle", "SIGNALS", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2",
        "signal names (SIGTERM, usr1) or numbers, separated by commas; not SIGKILL or SIGSTOP",
        "signals the agent catches and forwards to the workers before it stops them",
        [&config](const FlagValue& v) { config.signals_to_handle = parseSignals(v); });
  value(set, "--shutdown-timeout", "SECONDS", "30", "a number of seconds >= 0",
        "seconds between SIGTERM and SIGKILL when stopping workers", seconds(config.shutdown_timeout, true));
  value(set, "--exit-barrier-timeout", "SECONDS", "300", "a number of seconds >= 0",
        "seconds a node whose workers finished waits for the others", seconds(config.exit_barrier_timeout, true));
}

}  // namespace

void declareLaunchFlags(OptionSet& set, LaunchFlagValues& values) {
  declareNodeFlags(set, values);
  declareWorkerFlags(set, values);
  declareLogFlags(set, values);
  declareStopFlags(set, values.config);
}

}  // namespace dtrain
