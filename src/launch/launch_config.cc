// parseLaunchArgs: torchrun's command line (torch/distributed/run.py, torch
// 2.x) resolved into a LaunchConfig. The options are declared in
// launch_options (their values parsed and checked there, messages naming the
// flag or PET_ variable as given); what is resolved here depends on several
// of them, Slurm's environment or the machine: the worker count, the
// rendezvous endpoint and store, --standalone, and the worker command.
#include "launch/launch_config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <thread>

#include "common/env.h"
#include "common/error.h"
#include "common/process.h"
#include "common/socket.h"
#include "launch/launch_flags.h"
#include "launch/launch_options.h"
#include "launch/log_router.h"
#include "launch/slurm.h"
#include "store/tcp_store.h"
#if DTRAIN_WITH_ETCD_STORE
#include "store/etcd_store.h"
#endif

namespace dtrain {
namespace {

using Env = std::map<std::string, std::string>;

// The value given for `flag` (on the command line or as PET_), or nullptr.
const FlagValue* givenFlag(const LaunchArgs& parsed, const std::string& flag) {
  auto it = parsed.values.find(flag);
  return it == parsed.values.end() ? nullptr : &it->second;
}

// Fails naming `flag` as given, or with `otherwise` when it was not given
// (its value came from Slurm's environment or the default).
[[noreturn]] void failFlag(const LaunchArgs& parsed, const std::string& flag, const std::string& expected,
                           const std::string& otherwise) {
  if (const FlagValue* v = givenFlag(parsed, flag)) v->fail(expected);
  throw ConfigError(otherwise + ": " + expected);
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

// --nproc-per-node gpu, cpu or auto (torchrun's determine_local_world_size):
// GPUs (which must exist), CPUs, GPUs if any, else CPUs.
void countWorkers(const LaunchFlagValues& values, const LaunchArgs& parsed, LaunchConfig& config,
                  const Env& env, const std::string& device_root) {
  const WorkerCount count = values.worker_count;
  if (count == WorkerCount::kNumber) return;
  const int cpus = std::max(1u, std::thread::hardware_concurrency());
  if (count == WorkerCount::kCpus) {
    config.nproc_per_node = cpus;
    return;
  }
  const int gpus = countVisibleGpus(env, device_root);
  if (gpus == 0 && count == WorkerCount::kGpus) {
    givenFlag(parsed, "nproc-per-node")->fail("no GPU is visible (CUDA is not available)");
  }
  config.nproc_per_node = gpus > 0 ? gpus : cpus;
}

// --rdzv-endpoint, once the backend is known: etcd's members (the first one
// for messages), else HOST[:PORT]. Returns the port given, if any. An empty
// endpoint is torchrun's default: as if not given.
std::optional<uint16_t> readEndpoint(LaunchArgs& parsed, RendezvousConfig& rdzv) {
  const FlagValue* endpoint = givenFlag(parsed, "rdzv-endpoint");
  if (endpoint == nullptr) return std::nullopt;
  if (trimmed(endpoint->value).empty()) {
    parsed.values.erase("rdzv-endpoint");
    return std::nullopt;
  }
  if (rdzv.backend != RendezvousBackend::kEtcd) return parseEndpoint(*endpoint, rdzv.endpoint_host);
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
  return parseEndpoint(first, rdzv.endpoint_host);
}

// As torchrun: --standalone replaces the rendezvous flags. Returns the port
// of the store the agent will host.
uint16_t applyStandalone(const LaunchArgs& parsed, RendezvousConfig& rdzv) {
  if (rdzv.max_nodes != 1) failFlag(parsed, "nnodes", "--standalone runs a single node; expected 1", "nnodes");
  rdzv.backend = RendezvousBackend::kC10d;
  rdzv.endpoint_host = "127.0.0.1";
  rdzv.run_id = randomRunId();
  return freeTcpPort(/*loopback_only=*/true, "--standalone");
}

// The static rendezvous: node rank 0 hosts the agents' store, on a free
// loopback port for a single node, else on the port after --master-port;
// the workers' rank 0 (a PyTorch job's TCPStore) listens on the master port,
// as under torchrun.
void resolveStaticStore(const LaunchArgs& parsed, std::optional<uint16_t> endpoint_port, LaunchConfig& config) {
  RendezvousConfig& rdzv = config.rendezvous;
  if (rdzv.min_nodes != rdzv.max_nodes) {
    failFlag(parsed, "nnodes", "the static rendezvous needs a fixed node count; use --rdzv-backend c10d for MIN:MAX",
             "nnodes");
  }
  if (givenFlag(parsed, "rdzv-endpoint") != nullptr) {  // torchrun: it replaces master-addr:master-port
    config.master_addr = rdzv.endpoint_host;
    config.master_port = endpoint_port.value_or(config.master_port);
  }
  config.worker_master_port = config.master_port;
  if (rdzv.max_nodes == 1 && rdzv.is_host != 0) {
    rdzv.endpoint_host = "127.0.0.1";
    rdzv.endpoint_port = freeTcpPort(/*loopback_only=*/true, "the agent's store");
  } else {
    if (config.master_port == 65535) {
      failFlag(parsed, "master-port",
               "expected a port 1-65534: the agents' store of a static job of several nodes listens on the port "
               "after it",
               "master port 65535");
    }
    rdzv.endpoint_host = config.master_addr;
    rdzv.endpoint_port = static_cast<uint16_t>(config.master_port + 1);
  }
  if (rdzv.node_rank >= rdzv.max_nodes) {
    failFlag(parsed, "node-rank",
             "expected a node rank below the number of nodes (" + std::to_string(rdzv.max_nodes) + ")",
             "node rank " + std::to_string(rdzv.node_rank) + " from SLURM_NODEID");
  }
}

// Where the job store is, by backend; c10d and etcd assign node ranks.
void resolveStore(const LaunchArgs& parsed, std::optional<uint16_t> endpoint_port, LaunchConfig& config) {
  RendezvousConfig& rdzv = config.rendezvous;
  switch (rdzv.backend) {
    case RendezvousBackend::kStatic: return resolveStaticStore(parsed, endpoint_port, config);
    case RendezvousBackend::kEtcd:
      if (rdzv.etcd_endpoints.empty()) {
        throw ConfigError("--rdzv-backend etcd needs --rdzv-endpoint with the etcd cluster's members, e.g. "
                          "--rdzv-endpoint 10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379");
      }
      rdzv.endpoint_port = endpoint_port.value_or(2379);
      break;
    case RendezvousBackend::kC10d: rdzv.endpoint_port = endpoint_port.value_or(29400); break;
  }
  rdzv.node_rank = -1;
}

// The workers read the same variables, so the agent's store must demand
// what they will present: a token file counts as much as the variable.
std::string storeToken(const Env& env) {
  auto envValue = [&env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  return storeTokenFrom(envValue("DTRAIN_STORE_TOKEN"), envValue("DTRAIN_STORE_TOKEN_FILE"));
}

std::map<int, StreamSet> streamMap(const StreamChoice& choice, int nproc) {
  std::map<int, StreamSet> map{{kAllLocalRanks, choice.all}};
  for (int rank = 0; rank < nproc; ++rank) {
    auto it = choice.ranks.find(rank);
    map[rank] = it == choice.ranks.end() ? choice.all : it->second;
  }
  return map;
}

// The worker command: python (PYTHON_EXEC or python3) -u [-m] script args,
// or the program itself (--no-python, or an ELF executable).
void setWorkerCommand(const LaunchFlagValues& values, const std::vector<std::string>& args, size_t script_index,
                      const Env& env, LaunchConfig& config) {
  if (script_index >= args.size()) {
    throw ConfigError("the training script is missing: dtrain launch [options] training_script [args ...]");
  }
  if (values.module && values.no_python) {
    throw ConfigError("--module and --no-python cannot be used together (-m runs python -m MODULE)");
  }
  // torchrun runs sys.executable; the nearest equivalent is python3 on PATH.
  // --run-path (runpy in torchrun) runs the script the same way. A compiled
  // program (an ELF file, such as `dtrain train` or a library user's binary)
  // is run directly, as --no-python would: python could only fail on it.
  if (!values.no_python && !values.module && isElfExecutable(args[script_index])) {
    config.worker_argv.clear();
  } else if (!values.no_python) {
    auto python = env.find("PYTHON_EXEC");
    const bool from_env = python != env.end() && !python->second.empty();
    const std::string interpreter = from_env ? python->second : "python3";
    config.worker_argv = {interpreter, "-u"};
    if (values.module) config.worker_argv.push_back("-m");
    config.python_origin = from_env ? "PYTHON_EXEC" : "python3 on PATH";
    config.python_path = interpreter;
    try {
      auto path = env.find("PATH");
      config.python_path = resolveExecutable(interpreter, path == env.end() ? "" : path->second);
    } catch (const ConfigError&) {
      // Starting the workers says it, naming the command.
    }
  }
  config.worker_argv.insert(config.worker_argv.end(), args.begin() + static_cast<long>(script_index), args.end());
}

}  // namespace

LaunchConfig parseLaunchArgs(const std::vector<std::string>& args, const Env& env,
                             const std::string& device_root) {
  LaunchFlags flags;
  LaunchArgs parsed = readLaunchArgs(flags.set, args);
  LaunchConfig& config = flags.values.config;
  if (parsed.help) {
    LaunchConfig help;
    help.help_requested = true;
    return help;
  }
  addPetValues(flags.set, parsed, env);
  giveValues(flags.set, parsed);
  RendezvousConfig& rdzv = config.rendezvous;
  countWorkers(flags.values, parsed, config, env, device_root);
  std::optional<uint16_t> endpoint_port = readEndpoint(parsed, rdzv);
  if (!givenFlag(parsed, "log-line-prefix-template")) {
    auto it = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");  // torchrun reads the same variable
    if (it != env.end()) config.log_line_prefix_template = it->second;
  }
  if (config.standalone) endpoint_port = applyStandalone(parsed, rdzv);

  std::set<std::string> given;
  for (const auto& [name, value] : parsed.values) given.insert(name);
  applySlurmEnvironment(config, env, given, device_root);
  // torchrun's default "none" would let two jobs on one host share their
  // log folder names, status files (TORCHELASTIC_RUN_ID) and store keys.
  if (!given.count("rdzv-id") && !config.standalone && rdzv.run_id == "none" && rdzv.max_nodes == 1) {
    rdzv.run_id = localRunId();
  }
  resolveStore(parsed, endpoint_port, config);
  rdzv.local_world_size = config.nproc_per_node;
  rdzv.token = storeToken(env);
  config.redirects = streamMap(flags.values.redirects, config.nproc_per_node);
  config.tees = streamMap(flags.values.tees, config.nproc_per_node);
  setWorkerCommand(flags.values, args, parsed.script_index, env, config);
  config.default_omp_num_threads = config.nproc_per_node > 1 && env.count("OMP_NUM_THREADS") == 0;
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
    const std::string dirs = envString("PATH").value_or("");
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
