#include "cli/plan_calibrate.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "cli/plan_search.h"
#include "common/error.h"
#include "common/files.h"
#include "common/host.h"
#include "common/process.h"
#include "gpu/nvml.h"
#include "models/lm_counts.h"
#include "plan/calibration.h"
#include "plan/gpu_catalog.h"

namespace dtrain::cli {
namespace {

struct Machine {
  std::string name;  // NVIDIA's
  std::string catalog;
  int gpus = 0;
};

Machine thisMachine() {
  std::unique_ptr<gpu::Nvml> nvml;
  try {
    nvml = gpu::Nvml::open();
  } catch (const IoError& e) {
    throw ConfigError("dtrain plan --calibrate measures this machine's NVIDIA GPUs, and finds none: " + e.message() +
                      "; run it on a node of the cluster to plan for, or give --efficiency by hand");
  }
  if (nvml->gpus().empty()) {
    throw ConfigError("dtrain plan --calibrate: NVML lists no GPU on this machine; run it on a node of the cluster");
  }
  Machine m;
  m.gpus = static_cast<int>(nvml->gpus().size());
  m.name = nvml->name(nvml->gpus().front()).value_or("unknown GPU");
  m.catalog = plan::catalogNameOf(m.name);
  if (m.catalog.empty()) {
    throw ConfigError("dtrain plan --calibrate: " + m.name + " is not in dtrain's table of GPUs (h100, h200, b200, "
                      "a100-80g, a100-40g, l40s); give --efficiency and --intra-node-gbs by hand");
  }
  return m;
}

// argv's stdout into out_path, stderr into err_path; ConfigError naming
// the benchmark and its log when it fails.
void runBenchmark(const std::string& what, const std::vector<std::string>& argv, const std::string& out_path,
                  const std::string& err_path, const std::map<std::string, std::string>& env = {}) {
  RunOptions options;
  options.env = currentEnvironment();
  for (const auto& [key, value] : env) (*options.env)[key] = value;
  (*options.env)["DTRAIN_CALIBRATE_OUT"] = out_path;
  (*options.env)["DTRAIN_CALIBRATE_ERR"] = err_path;
  options.timeout = std::chrono::minutes(10);
  std::vector<std::string> shell = {"/bin/sh", "-c", "exec \"$@\" >\"$DTRAIN_CALIBRATE_OUT\" 2>\"$DTRAIN_CALIBRATE_ERR\"",
                                    "sh"};
  shell.insert(shell.end(), argv.begin(), argv.end());
  const RunResult r = runProcess(shell, options);
  if (r.exitCode() != 0) {
    throw ConfigError("dtrain plan --calibrate: " + what + " failed (" + describeWaitStatus(r.wait_status) +
                      (r.timed_out ? ", timed out" : "") + "); its output is in " + err_path);
  }
}

nlohmann::json readJsonFile(const std::string& what, const std::string& path) {
  std::ifstream in(path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("dtrain plan --calibrate: " + what + " wrote no JSON to " + path + " (" + e.what() + ")");
  }
}

std::string utcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

int runPlanCalibrate(const std::string& path) {
  const Machine m = thisMachine();
  const plan::GpuSpec& spec = plan::gpuByName(m.catalog);
  const std::string self = selfExecutablePath();
  const std::string dir = makeTemporaryDirectory("dtrain-plan-calibrate");
  plan::Calibration c;
  c.gpu = m.catalog;
  c.gpu_name = m.name;
  c.gpus = m.gpus;
  c.host = hostName();
  c.model = "llama-1b";
  c.seq_len = 2048;
  c.batch_size = spec.memory_gib >= 60 ? 4 : 2;  // llama-1b at batch 4 peaks at 34 GiB
  std::fprintf(stderr, "dtrain plan --calibrate: %d x %s (%s): dtrain bench train, llama-1b seq 2048 batch %lld ...\n",
               m.gpus, m.name.c_str(), m.catalog.c_str(), static_cast<long long>(c.batch_size));
  runBenchmark("dtrain bench train",
               {self, "bench", "train", "--gpus", "1", "--model", c.model, "--seq-len", std::to_string(c.seq_len),
                "--batch-size", std::to_string(c.batch_size), "--precision", "bf16", "--steps", "10", "--warmup", "4",
                "--json"},
               dir + "/train.json", dir + "/train.log");
  const nlohmann::json train = readJsonFile("dtrain bench train", dir + "/train.json");
  c.tokens_per_s = train.at("results").at(0).at("tokens_per_s").get<double>();
  // The products' efficiency, the step model's memory term taken out.
  c.efficiency = calibrationEfficiency({.name = c.model, .seq_len = c.seq_len}, spec, c.batch_size, c.tokens_per_s);
  if (m.gpus >= 2) {
    std::fprintf(stderr, "dtrain plan --calibrate: dtrain bench allreduce over %d GPUs at 1 GiB ...\n", m.gpus);
    runBenchmark("dtrain bench allreduce",
                 {self, "bench", "allreduce", "-g", std::to_string(m.gpus), "-b", "1G", "-e", "1G", "-n", "20", "-w",
                  "5", "--json"},
                 dir + "/allreduce.json", dir + "/allreduce.log",
                 {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"},
                  {"MASTER_PORT", std::to_string(29000 + ::getpid() % 1000)}});
    const nlohmann::json ar = readJsonFile("dtrain bench allreduce", dir + "/allreduce.json");
    c.intra_node_gbs = ar.at("rows").at(0).at("out_of_place").at("busbw_gbps").get<double>();
  }
  c.date = utcNow();
  plan::writeCalibration(path, c);
  std::filesystem::remove_all(dir);
  std::printf("dtrain plan --calibrate: %s on %s: llama-1b at %.0f tokens/s on one GPU = efficiency %.3f of the bf16 "
              "peak (%.1f TFLOP/s) for the products, the step's memory term apart%s; written to %s\n",
              m.name.c_str(), c.host.c_str(), c.tokens_per_s, c.efficiency, spec.bf16_tflops,
              m.gpus >= 2 ? (", all-reduce bus bandwidth " + std::to_string(static_cast<int>(c.intra_node_gbs)) +
                             " GB/s over " + std::to_string(m.gpus) + " GPUs").c_str()
                          : ", one GPU: no all-reduce measured",
              path.c_str());
  return 0;
}

}  // namespace dtrain::cli
