#include "bench/launcher_environment.h"

#include <cstdint>
#include <cstdlib>

#include "common/env.h"
#include "common/error.h"
#include "common/hostlist.h"
#include "common/settings.h"

namespace dtrain::bench {
namespace {

// The variable names one launcher uses.
struct LauncherVariables {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr LauncherVariables kLaunchers[] = {
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"MPICH/Hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

int64_t integer(const std::string& name, const std::string& text, int64_t min, int64_t max) {
  int64_t value = 0;
  try {
    value = parseInt64(text, name);
  } catch (const ConfigError&) {
    throw ConfigError(name + "='" + text + "' is not an integer; expected " + std::to_string(min) + ".." +
                      std::to_string(max));
  }
  if (value < min || value > max) {
    throw ConfigError(name + "=" + text + " is out of range; expected " + std::to_string(min) + ".." +
                      std::to_string(max));
  }
  return value;
}

std::optional<int64_t> optionalInteger(const EnvironmentLookup& lookup, const char* name, int64_t min,
                                       int64_t max) {
  if (name == nullptr) return std::nullopt;
  auto text = lookup(name);
  if (!text || text->empty()) return std::nullopt;
  return integer(name, *text, min, max);
}

// The host of rank 0 from the Slurm node lists, if any.
std::optional<std::string> firstSlurmHost(const EnvironmentLookup& lookup) {
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}) {
    auto list = lookup(name);
    if (!list || list->empty()) continue;
    try {
      return expandHostlist(*list).front();
    } catch (const ConfigError& e) {
      throw ConfigError(std::string(name) + ": " + e.what());
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<LauncherJob> launcherJob(const EnvironmentLookup& lookup) {
  if (lookup("RANK") || lookup("WORLD_SIZE")) return std::nullopt;
  const LauncherVariables* found = nullptr;
  for (const auto& vars : kLaunchers) {
    if (lookup(vars.rank) && lookup(vars.size)) {
      found = &vars;
      break;
    }
  }
  std::optional<std::string> slurm_size_name;
  if (found == nullptr && lookup("SLURM_PROCID") && lookup("SLURM_NPROCS")) {
    found = &kLaunchers[2];
    slurm_size_name = "SLURM_NPROCS";
  }
  if (found == nullptr) return std::nullopt;

  LauncherJob job;
  job.launcher = found->launcher;
  const std::string size_name = slurm_size_name.value_or(found->size);
  job.size = static_cast<int>(integer(size_name, *lookup(size_name), 1, 1 << 20));
  job.rank = static_cast<int>(integer(found->rank, *lookup(found->rank), 0, job.size - 1));
  job.local_rank = static_cast<int>(optionalInteger(lookup, found->local_rank, 0, 1 << 16).value_or(0));
  if (auto local_size = optionalInteger(lookup, found->local_size, 1, 1 << 16)) {
    job.local_size = static_cast<int>(*local_size);
  }

  const auto slurm_job_id = lookup("SLURM_JOB_ID");
  if (auto addr = lookup("MASTER_ADDR"); addr && !addr->empty()) {
    job.master_addr = *addr;
  } else if (auto host = firstSlurmHost(lookup)) {
    job.master_addr = *host;
  } else if (job.local_size && *job.local_size == job.size) {
    job.master_addr = "127.0.0.1";
  } else {
    throw ConfigError(std::string(found->size) + "=" + std::to_string(job.size) + " (" + job.launcher +
                      ") may span hosts and no node list names rank 0's host; set MASTER_ADDR to rank 0's "
                      "host (mpirun -x MASTER_ADDR=<host>)");
  }
  if (auto port = lookup("MASTER_PORT"); port && !port->empty()) {
    job.master_port = static_cast<int>(integer("MASTER_PORT", *port, 1, 65535));
  } else if (slurm_job_id && !slurm_job_id->empty()) {
    int64_t id = integer("SLURM_JOB_ID", *slurm_job_id, 0, INT64_MAX);
    job.master_port = static_cast<int>(10000 + id % 50000);
  }
  return job;
}

std::optional<LauncherJob> adoptLauncherEnvironment() {
  auto job = launcherJob([](const std::string& name) { return envString(name); });
  if (!job) return job;
  // comm/world.h reads torchrun's variables; no thread runs yet.
  ::setenv("RANK", std::to_string(job->rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(job->size).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(job->local_rank).c_str(), 1);
  if (job->local_size) ::setenv("LOCAL_WORLD_SIZE", std::to_string(*job->local_size).c_str(), 1);
  ::setenv("MASTER_ADDR", job->master_addr.c_str(), 1);
  ::setenv("MASTER_PORT", std::to_string(job->master_port).c_str(), 1);
  return job;
}

}  // namespace dtrain::bench
