// parseLaunchArgs: torchrun's command line (torch/distributed/run.py, torch
// 2.x) resolved into a LaunchConfig. Values follow torchrun's rules; each
// message names the flag or PET_ variable as given, the value, and what was
// expected. The grammar (flags, spellings, PET_ names) is in launch_flags.
#include "launch/launch_config.h"

#include "common/process.h"
#include "common/socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <cstdio>
#include <ctime>
#include <random>
#include <thread>

#include "common/error.h"
#include "common/settings.h"
#include "launch/launch_flags.h"
#include "launch/log_router.h"
#include "launch/slurm.h"
#include "store/tcp_store.h"
#if DTRAIN_WITH_ETCD_STORE
#include "store/etcd_store.h"
#endif


namespace dtrain {
namespace {

using Env = std::map<std::string, std::string>;

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

// torchrun's determine_local_world_size: a number, or gpu (GPUs, which must
// exist), cpu (CPUs), auto (GPUs if any, else CPUs).
int parseNproc(const FlagValue& raw, const std::map<std::string, std::string>& env,
               const std::string& device_root) {
  const int cpus = std::max(1u, std::thread::hardware_concurrency());
  if (raw.value == "cpu") return cpus;
  if (raw.value == "gpu" || raw.value == "auto") {
    int gpus = countVisibleGpus(env, device_root);
    if (gpus == 0 && raw.value == "gpu") raw.fail("no GPU is visible (CUDA is not available)");
    return gpus > 0 ? gpus : cpus;
  }
  return raw.toInt(1, 1'000'000, "expected a positive integer, auto, gpu or cpu");
}

// host[:port], "[v6addr]:port" (torchrun's parse_rendezvous_endpoint).
// Returns the port, or nullopt when none is given.
std::optional<uint16_t> parseEndpoint(const FlagValue& raw, std::string& host) {
  const std::string text = trimmed(raw.value);
  std::string port_text;
  bool has_port = false;
  if (text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos) raw.fail("'[' of an IPv6 address is never closed");
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') raw.fail("expected HOST[:PORT] or [IPV6][:PORT]");
      port_text = text.substr(close + 2);
      has_port = true;
    }
  } else {
    size_t colon = text.find(':');
    if (colon != text.rfind(':')) raw.fail("an IPv6 address goes in brackets: [ADDR]:PORT");
    host = text.substr(0, colon);
    has_port = colon != std::string::npos;
    if (has_port) port_text = text.substr(colon + 1);
  }
  if (host.empty()) raw.fail("the host is missing; expected HOST[:PORT]");
  for (char c : host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && std::string("._-:%").find(c) == std::string::npos) {
      raw.fail("the host must be a name, an IPv4 or an IPv6 address");
    }
  }
  if (!has_port) return std::nullopt;
  const std::string expected = "expected a port 1-65535 after the host";
  FlagValue port_raw = raw;
  port_raw.value = port_text;
  try {
    return static_cast<uint16_t>(port_raw.toInt(1, 65535, expected));
  } catch (const ConfigError&) {
    raw.fail(expected);  // naming the whole endpoint
  }
}

// torchrun's --rdzv-conf keys that dtrain reads; read_timeout and use_libuv
// (c10d store tuning) are accepted and have no effect.
void parseRdzvConf(const FlagValue& raw, RendezvousConfig& rdzv) {
  const std::string known =
      "join_timeout, last_call_timeout, close_timeout, timeout, keep_alive_interval, "
      "keep_alive_max_attempt, is_host, read_timeout, use_libuv";
  if (trimmed(raw.value).empty()) return;
  for (const std::string& item : splitList(raw.value, ',')) {
    size_t eq = item.find('=');
    const std::string key = trimmed(item.substr(0, eq));
    // Named in messages as "--rdzv-conf join_timeout=0".
    FlagValue value{eq == std::string::npos ? "" : trimmed(item.substr(eq + 1)), raw.origin + " " + key, true};
    if (key.empty()) raw.fail("expected KEY=VALUE,KEY=VALUE");
    if (value.value.empty()) raw.fail("the option '" + key + "' needs a value (KEY=VALUE)");
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
    } else {
      raw.fail("unknown option '" + key + "'; known: " + known);
    }
  }
}

// torchrun's Std.from_str: one digit for every local rank, or
// LOCAL_RANK:DIGIT,... (ranks not named: none).
struct StreamChoice {
  StreamSet all = StreamSet::kNone;
  std::map<int, StreamSet> ranks;
};

StreamChoice parseStreams(const FlagValue& raw) {
  const std::string expected =
      "expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both), or per local rank like 0:1,1:2";
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

std::map<int, StreamSet> streamMap(const StreamChoice& choice, int nproc) {
  std::map<int, StreamSet> map{{kAllLocalRanks, choice.all}};
  for (int rank = 0; rank < nproc; ++rank) {
    auto it = choice.ranks.find(rank);
    map[rank] = it == choice.ranks.end() ? choice.all : it->second;
  }
  return map;
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

// A version-4 UUID, as torchrun's --standalone run id.
std::string randomRunId() {
  std::random_device device;
  unsigned char b[16];
  for (auto& byte : b) byte = static_cast<unsigned char>(device());
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  char text[37];
  std::snprintf(text, sizeof text, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

std::string flagDefault(const std::string& name) {
  for (const LaunchFlag& f : kLaunchFlags) {
    if (name == f.name) return f.default_text;
  }
  return "";
}

}  // namespace

LaunchConfig parseLaunchArgs(const std::vector<std::string>& args, const Env& env,
                             const std::string& device_root) {
  LaunchConfig config;
  LaunchArgs parsed = readLaunchArgs(args);
  if (parsed.help) {
    config.help_requested = true;
    return config;
  }
  addPetValues(parsed, env);
  auto get = [&](const char* name) -> const FlagValue* {
    auto it = parsed.values.find(name);
    return it == parsed.values.end() ? nullptr : &it->second;
  };
  auto nonEmpty = [](const FlagValue& v, const char* expected) {
    if (trimmed(v.value).empty()) v.fail(expected);
    return v.value;
  };
  const std::string kCount = "expected an integer >= 0";
  RendezvousConfig& rdzv = config.rendezvous;

  if (auto* v = get("nnodes")) parseNodes(*v, rdzv);
  if (auto* v = get("nproc-per-node")) config.nproc_per_node = parseNproc(*v, env, device_root);
  rdzv.node_rank = 0;
  if (auto* v = get("node-rank")) rdzv.node_rank = v->toInt(0, 1'000'000, kCount);
  config.master_addr = "127.0.0.1";
  if (auto* v = get("master-addr")) config.master_addr = nonEmpty(*v, "expected a host name or address");
  if (auto* v = get("master-port")) config.master_port = v->toInt(1, 65535, "expected a port 1-65535");
  if (auto* v = get("local-addr")) rdzv.local_address = v->value;
  if (auto* v = get("rdzv-backend")) {
    if (v->value != "static" && v->value != "c10d" && v->value != "etcd" && v->value != "etcd-v3") {
      v->fail("expected static, c10d or etcd (alias etcd-v3; etcd-v2 is not supported)");
    }
    rdzv.backend = v->value == "etcd-v3" ? "etcd" : v->value;
  }
  std::optional<uint16_t> endpoint_port;
  const FlagValue* endpoint = get("rdzv-endpoint");
  if (endpoint != nullptr && trimmed(endpoint->value).empty()) {
    parsed.values.erase("rdzv-endpoint");  // torchrun: "" is the default
    endpoint = nullptr;
  }
  if (endpoint != nullptr && rdzv.backend == "etcd") {
    // A comma-separated list of the etcd cluster's members.
#if DTRAIN_WITH_ETCD_STORE
    try {
      rdzv.etcd_endpoints = parseEtcdEndpoints(endpoint->value);
    } catch (const ConfigError& e) {
      endpoint->fail(e.message());
    }
#else
    endpoint->fail("this dtrain was built without the etcd store (cpp-httplib was not found)");
#endif
    FlagValue first = *endpoint;
    first.value = rdzv.etcd_endpoints.front();
    endpoint_port = parseEndpoint(first, rdzv.endpoint_host);
  } else if (endpoint != nullptr) {
    endpoint_port = parseEndpoint(*endpoint, rdzv.endpoint_host);
  }
  if (auto* v = get("rdzv-id")) rdzv.run_id = nonEmpty(*v, "expected a run id");
  if (auto* v = get("rdzv-conf")) parseRdzvConf(*v, rdzv);
  if (auto* v = get("standalone")) config.standalone = v->toSwitch();
  if (auto* v = get("max-restarts")) config.max_restarts = v->toInt(0, 1'000'000, kCount);
  if (auto* v = get("monitor-interval")) config.monitor_interval = v->toSeconds(false);
  if (auto* v = get("start-method"); v && v->value != "spawn" && v->value != "fork" && v->value != "forkserver") {
    v->fail("expected spawn, fork or forkserver");
  }
  if (auto* v = get("role")) config.role = nonEmpty(*v, "expected a role name");
  const bool module = get("module") && get("module")->toSwitch();
  const bool no_python = get("no-python") && get("no-python")->toSwitch();
  if (auto* v = get("run-path")) v->toSwitch();  // runs as the default does
  if (auto* v = get("log-dir")) config.log_dir = v->value;
  StreamChoice redirects, tees;
  if (auto* v = get("redirects")) redirects = parseStreams(*v);
  if (auto* v = get("tee")) tees = parseStreams(*v);
  if (auto* v = get("local-ranks-filter")) config.local_ranks_filter = parseRanksFilter(*v);
  if (auto* v = get("log-line-prefix-template")) {
    config.log_line_prefix_template = v->value;
  } else if (auto it = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); it != env.end()) {
    config.log_line_prefix_template = it->second;  // torchrun reads the same variable
  }
  const FlagValue* signals = get("signals-to-handle");
  config.signals_to_handle = parseSignals(signals ? *signals : FlagValue{flagDefault("signals-to-handle"), "--signals-to-handle"});
  if (auto* v = get("shutdown-timeout")) config.shutdown_timeout = v->toSeconds(true);
  if (auto* v = get("exit-barrier-timeout")) config.exit_barrier_timeout = v->toSeconds(true);

  if (config.standalone) {  // as torchrun: the rendezvous flags are replaced
    if (rdzv.max_nodes != 1) get("nnodes")->fail("--standalone runs a single node; expected 1");
    rdzv.backend = "c10d";
    rdzv.endpoint_host = "127.0.0.1";
    endpoint_port = freeTcpPort(/*loopback_only=*/true, "--standalone");
    rdzv.run_id = randomRunId();
  }

  std::set<std::string> given;
  for (const auto& [name, value] : parsed.values) given.insert(name);
  applySlurmEnvironment(config, env, given, device_root);
  // torchrun's default "none" would let two jobs on one host share their
  // log folder names, status files (TORCHELASTIC_RUN_ID) and store keys.
  if (!get("rdzv-id") && !config.standalone && rdzv.run_id == "none" && rdzv.max_nodes == 1) {
    rdzv.run_id = localRunId();
  }

  if (rdzv.backend == "static") {
    if (rdzv.min_nodes != rdzv.max_nodes) {
      get("nnodes")->fail("the static rendezvous needs a fixed node count; use --rdzv-backend c10d for MIN:MAX");
    }
    if (endpoint != nullptr) {  // torchrun: an endpoint given replaces master-addr:master-port
      config.master_addr = rdzv.endpoint_host;
      config.master_port = endpoint_port.value_or(config.master_port);
    }
    // The workers' rank 0 (a PyTorch job's TCPStore) listens on the master
    // port, as under torchrun; the agents' store cannot share it.
    config.worker_master_port = config.master_port;
    if (rdzv.max_nodes == 1 && rdzv.is_host != 0) {
      rdzv.endpoint_host = "127.0.0.1";
      rdzv.endpoint_port = freeTcpPort(/*loopback_only=*/true, "the agent's store");
    } else {
      if (config.master_port == 65535) {
        const std::string expected = "expected a port 1-65534: the agents' store of a static job of several "
                                     "nodes listens on the port after it";
        if (auto* v = get("master-port")) v->fail(expected);
        throw ConfigError("master port 65535: " + expected);
      }
      rdzv.endpoint_host = config.master_addr;
      rdzv.endpoint_port = static_cast<uint16_t>(config.master_port + 1);
    }
    if (rdzv.node_rank >= rdzv.max_nodes) {
      const std::string expected = "expected a node rank below the number of nodes (" + std::to_string(rdzv.max_nodes) + ")";
      if (auto* v = get("node-rank")) v->fail(expected);
      throw ConfigError("node rank " + std::to_string(rdzv.node_rank) + " from SLURM_NODEID: " + expected);
    }
  } else if (rdzv.backend == "etcd") {
    if (rdzv.etcd_endpoints.empty()) {
      throw ConfigError("--rdzv-backend etcd needs --rdzv-endpoint with the etcd cluster's members, e.g. "
                        "--rdzv-endpoint 10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379");
    }
    rdzv.endpoint_port = endpoint_port.value_or(2379);
    rdzv.node_rank = -1;
  } else {
    rdzv.endpoint_port = endpoint_port.value_or(29400);
    rdzv.node_rank = -1;
  }
  rdzv.local_world_size = config.nproc_per_node;
  {
    // The workers read the same variables, so the agent's store must demand
    // what they will present: a token file counts as much as the variable.
    auto envValue = [&env](const char* name) -> std::optional<std::string> {
      auto it = env.find(name);
      return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
    rdzv.token = storeTokenFrom(envValue("DTRAIN_STORE_TOKEN"), envValue("DTRAIN_STORE_TOKEN_FILE"));
  }
  config.redirects = streamMap(redirects, config.nproc_per_node);
  config.tees = streamMap(tees, config.nproc_per_node);

  if (parsed.script_index >= args.size()) {
    throw ConfigError("the training script is missing: dtrain launch [options] training_script [args ...]");
  }
  if (module && no_python) {
    throw ConfigError("--module and --no-python cannot be used together (-m runs python -m MODULE)");
  }
  // torchrun runs sys.executable; the nearest equivalent is python3 on PATH.
  // --run-path (runpy in torchrun) runs the script the same way. A compiled
  // program (an ELF file, such as `dtrain train` or a library user's binary)
  // is run directly, as --no-python would: python could only fail on it.
  if (!no_python && !module && isElfExecutable(args[parsed.script_index])) {
    config.worker_argv.clear();
  } else if (!no_python) {
    auto python = env.find("PYTHON_EXEC");
    const bool from_env = python != env.end() && !python->second.empty();
    const std::string interpreter = from_env ? python->second : "python3";
    config.worker_argv = {interpreter, "-u"};
    if (module) config.worker_argv.push_back("-m");
    config.python_origin = from_env ? "PYTHON_EXEC" : "python3 on PATH";
    config.python_path = interpreter;
    try {
      auto path = env.find("PATH");
      config.python_path = resolveExecutable(interpreter, path == env.end() ? "" : path->second);
    } catch (const ConfigError&) {
      // Starting the workers says it, naming the command.
    }
  }
  config.default_omp_num_threads = config.nproc_per_node > 1 && env.count("OMP_NUM_THREADS") == 0;
  config.worker_argv.insert(config.worker_argv.end(), args.begin() + static_cast<long>(parsed.script_index),
                            args.end());
  return config;
}

std::string localRunId() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &utc);
  return "job-" + std::string(stamp) + "-" + std::to_string(::getpid());
}

bool isElfExecutable(const std::string& path) {
  std::string resolved = path;
  if (path.find('/') == std::string::npos) {
    // A bare name is looked up on PATH, as execvp will.
    const char* search = std::getenv("PATH");
    std::string dirs = search != nullptr ? search : "";
    resolved.clear();
    size_t start = 0;
    while (start <= dirs.size()) {
      size_t end = dirs.find(':', start);
      if (end == std::string::npos) end = dirs.size();
      std::string candidate = dirs.substr(start, end - start) + "/" + path;
      if (::access(candidate.c_str(), X_OK) == 0) {
        resolved = candidate;
        break;
      }
      start = end + 1;
    }
    if (resolved.empty()) return false;
  }
  std::ifstream file(resolved, std::ios::binary);
  char magic[4] = {};
  return file.read(magic, 4) && magic[0] == 0x7f && magic[1] == 'E' && magic[2] == 'L' && magic[3] == 'F';
}

}  // namespace dtrain
