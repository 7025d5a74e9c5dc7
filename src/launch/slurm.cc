#include "launch/slurm.h"

#include <cstdint>
#include <optional>

#include "common/error.h"
#include "common/hostlist.h"
#include "common/settings.h"

namespace dtrain {
namespace {

using Env = std::map<std::string, std::string>;

// The first of `names` set to a non-empty value, as {name, value}.
std::optional<std::pair<std::string, std::string>> firstSet(const Env& env,
                                                            std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto it = env.find(name);
    if (it != env.end() && !it->second.empty()) return std::make_pair(it->first, it->second);
  }
  return std::nullopt;
}

int slurmInt(const std::pair<std::string, std::string>& var, int64_t min) {
  int64_t value = parseInt64(var.second, var.first);
  if (value < min || value > 1'000'000) {
    throw ConfigError(var.first + "='" + var.second + "' is out of range; expected an integer >= " +
                      std::to_string(min));
  }
  return static_cast<int>(value);
}

}  // namespace

void applySlurmEnvironment(LaunchConfig& config, const Env& env,
                           const std::set<std::string>& explicit_flags,
                           const std::string& device_root) {
  if (!firstSet(env, {"SLURM_JOB_ID"})) return;
  auto given = [&](const char* flag) { return explicit_flags.count(flag) > 0; };

  if (!given("nproc-per-node")) {
    if (auto gpus = firstSet(env, {"SLURM_GPUS_ON_NODE"}); gpus && slurmInt(*gpus, 0) > 0) {
      config.nproc_per_node = slurmInt(*gpus, 0);
    } else if (int visible = countVisibleGpus(env, device_root); visible > 0) {
      config.nproc_per_node = visible;
    }
  }
  if (config.standalone) return;

  if (!given("nnodes")) {
    if (auto nodes = firstSet(env, {"SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"})) {
      config.rendezvous.min_nodes = config.rendezvous.max_nodes = slurmInt(*nodes, 1);
    }
  }
  if (!given("node-rank")) {
    if (auto node_id = firstSet(env, {"SLURM_NODEID"})) config.rendezvous.node_rank = slurmInt(*node_id, 0);
  }
  if (auto nodelist = firstSet(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})) {
    std::string first_host;
    try {
      first_host = expandHostlist(nodelist->second).front();
    } catch (const ConfigError& e) {
      throw ConfigError(nodelist->first + ": " + e.message());
    }
    if (!given("master-addr")) config.master_addr = first_host;
    if (!given("rdzv-endpoint")) config.rendezvous.endpoint_host = first_host;
  }
  if (!given("rdzv-id")) config.rendezvous.run_id = firstSet(env, {"SLURM_JOB_ID"})->second;
}

}  // namespace dtrain
