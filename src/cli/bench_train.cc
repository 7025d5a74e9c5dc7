// `dtrain bench train`: training throughput and scaling on synthetic data
// resident on the GPUs, the step `dtrain train` runs (CUDA graphs by default).
//
//   dtrain bench train --gpus 1,2,4 --model resnet50 --image-size 32 --batch-size 64
//
// With --gpus it starts one group per GPU count (`dtrain launch --standalone
// --nproc-per-node G`) and prints one row per count: samples/s, step time and
// scaling efficiency against the first count. Under a launcher (WORLD_SIZE
// set) without --gpus it measures the group it runs in.
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/training_runtime.h"
#include "common/error.h"
#include "common/units.h"
#include "train/bench_train.h"

namespace dtrain::cli {
namespace {

struct BenchTrainFlags {
  BenchTrainConfig config;
  std::string gpus;
  bool json = false;
};

std::vector<int> parseGpuList(const std::string& text) {
  std::vector<int> gpus;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value < 1 || value > 1024) {
      throw ConfigError("--gpus '" + text + "': '" + item + "' is not a GPU count; expected a list like 1,2,4");
    }
    gpus.push_back(static_cast<int>(value));
  }
  if (gpus.empty()) throw ConfigError("--gpus is empty; expected a list like 1,2,4");
  return gpus;
}

std::string selfPath() {
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) throw IoError("cannot find this program's path (/proc/self/exe)");
  return std::string(self, static_cast<size_t>(n));
}

// The worker's flags: everything but --gpus and --json, plus the result file.
std::vector<std::string> workerArgs(const BenchTrainConfig& c, const std::string& result_file) {
  std::vector<std::string> a = {"bench", "train", "--model", c.model, "--stem", c.stem, "--image-size",
                                std::to_string(c.image_size), "--batch-size", std::to_string(c.batch_size),
                                "--classes", std::to_string(c.classes), "--precision", c.precision, "--steps",
                                std::to_string(c.steps), "--warmup", std::to_string(c.warmup), "--graph-warmup",
                                std::to_string(c.graph_warmup), "--bucket-mb", std::to_string(c.bucket_mb),
                                "--backend", c.backend, "--timeout", std::to_string(c.timeout_s),
                                "--result-file", result_file};
  if (c.channels_last) a.push_back("--channels-last");
  if (!c.cuda_graphs) a.push_back("--no-cuda-graphs");
  if (!c.cudnn_benchmark) a.push_back("--no-cudnn-benchmark");
  if (c.breakdown) a.push_back("--breakdown");
  return a;
}

int runProcess(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw IoError("fork failed");
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    std::perror("dtrain bench train: exec");
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw IoError("waitpid failed");
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string describe(const BenchTrainConfig& c) {
  std::ostringstream out;
  out << c.model;
  if (c.model.rfind("resnet", 0) == 0) out << " (" << c.stem << " stem)";
  out << ", " << c.channels << "x" << c.image_size << "x" << c.image_size << ", batch " << c.batch_size
      << "/GPU, " << c.precision << ", " << (c.channels_last ? "channels-last" : "NCHW") << ", "
      << (c.cuda_graphs ? "CUDA graphs" : "eager") << ", cudnn.benchmark " << (c.cudnn_benchmark ? "on" : "off")
      << ", " << c.steps << " steps after " << c.warmup << " warm-up";
  return out.str();
}

void printTable(const BenchTrainConfig& c, const std::vector<nlohmann::json>& rows) {
  std::printf("# dtrain bench train: %s\n", describe(c).c_str());
  if (!rows.empty() && rows.front().contains("versions")) {
    const auto& v = rows.front()["versions"];
    std::printf("# %s\n", v.dump().c_str());
  }
  std::printf("#%6s %12s %10s %9s %10s  %s\n", "gpus", "samples/s", "step_ms", "scaling", "loss", "graphs");
  for (const auto& r : rows) {
    std::printf(" %6d %12.1f %10.3f %8.1f%% %10.4f  %s\n", r["gpus"].get<int>(), r["samples_per_s"].get<double>(),
                r["step_ms"].get<double>(), 100.0 * r["scaling_efficiency"].get<double>(), r["loss"].get<double>(),
                r["graphs"].get<std::string>().c_str());
    if (r.contains("breakdown")) std::printf("#   time split (eager, ms): %s\n", r["breakdown"].dump().c_str());
  }
}

int runBench(const BenchTrainFlags& f) {
  const char* world = std::getenv("WORLD_SIZE");
  auto run_worker = trainingRuntime<int (*)(const BenchTrainConfig*)>("dtrain_run_bench_train");
  if (f.gpus.empty() && world != nullptr) return run_worker(&f.config);  // one row, this group

  const std::vector<int> counts = parseGpuList(f.gpus.empty() ? "1" : f.gpus);
  const std::string self = selfPath();
  char dir_template[] = "/tmp/dtrain-bench-train-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) throw IoError("cannot create a temporary directory under /tmp");
  const std::filesystem::path dir(dir_template);
  std::vector<nlohmann::json> rows;
  int status = 0;
  for (int g : counts) {
    const std::string result_file = (dir / ("gpus-" + std::to_string(g) + ".json")).string();
    std::vector<std::string> args = {self, "launch", "--standalone", "--nproc-per-node", std::to_string(g), self};
    for (std::string& a : workerArgs(f.config, result_file)) args.push_back(std::move(a));
    const int rc = runProcess(args);
    std::ifstream in(result_file);
    if (rc != 0 || !in) {
      std::fprintf(stderr, "dtrain bench train: the %d-GPU run failed (exit code %d)\n", g, rc);
      status = rc != 0 ? rc : 1;
      break;
    }
    nlohmann::json row = nlohmann::json::parse(in);
    const double base = rows.empty() ? row["samples_per_s"].get<double>() / g
                                     : rows.front()["samples_per_s"].get<double>() / rows.front()["gpus"].get<int>();
    row["scaling_efficiency"] = row["samples_per_s"].get<double>() / (base * g);
    rows.push_back(std::move(row));
  }
  std::filesystem::remove_all(dir);
  if (f.json) {
    nlohmann::json out;
    out["bench"] = "train";
    out["config"] = {{"model", f.config.model},         {"stem", f.config.stem},
                     {"image_size", f.config.image_size}, {"batch_size", f.config.batch_size},
                     {"precision", f.config.precision}, {"channels_last", f.config.channels_last},
                     {"steps", f.config.steps},          {"warmup", f.config.warmup},
                     {"cuda_graphs", f.config.cuda_graphs}, {"cudnn_benchmark", f.config.cudnn_benchmark}};
    out["results"] = rows;
    std::cout << out.dump() << std::endl;
  } else {
    printTable(f.config, rows);
  }
  return status;
}

}  // namespace

void registerBenchTrain(CLI::App& bench, ExitCode& exit_code) {
  CLI::App* cmd = bench.add_subcommand(
      "train", "Training throughput and scaling on synthetic data resident on the GPUs (samples/s, step time, "
               "scaling efficiency against the first GPU count)");
  auto f = std::make_shared<BenchTrainFlags>();
  BenchTrainConfig& c = f->config;
  cmd->add_option("--gpus", f->gpus,
                  "GPU counts to run, e.g. 1,2,4: one `dtrain launch --standalone` group each (default: 1, or "
                  "the launcher's group when WORLD_SIZE is set)");
  cmd->add_option("--model", c.model, "mlp | cnn | resnet18 | resnet34 | resnet50")->capture_default_str();
  cmd->add_option("--stem", c.stem, "ResNet stem: imagenet (as torchvision) | cifar | auto")->capture_default_str();
  cmd->add_option("--image-size", c.image_size, "Height = width of the synthetic images")->capture_default_str();
  cmd->add_option("--batch-size", c.batch_size, "Samples per GPU per step")->capture_default_str();
  cmd->add_option("--classes", c.classes, "Classes of the synthetic labels")->capture_default_str();
  cmd->add_option("--precision", c.precision, "fp32 | bf16 (autocast)")->capture_default_str();
  cmd->add_flag("--channels-last", c.channels_last, "Images and conv weights in channels-last memory format");
  cmd->add_option("--steps", c.steps, "Timed steps")->capture_default_str();
  cmd->add_option("--warmup", c.warmup, "Untimed steps first (the CUDA graph is captured among them)")
      ->capture_default_str();
  cmd->add_flag("!--no-cuda-graphs", c.cuda_graphs, "Run every step eagerly instead of replaying a CUDA graph");
  cmd->add_option("--graph-warmup", c.graph_warmup, "Eager steps before the capture")->capture_default_str();
  cmd->add_flag("!--no-cudnn-benchmark", c.cudnn_benchmark, "Do not let cuDNN time its algorithms");
  cmd->add_option("--bucket-mb", c.bucket_mb, "Gradient bucket size in MiB")->capture_default_str();
  cmd->add_option("--backend", c.backend, "auto | nccl | gloo")->capture_default_str();
  cmd->add_option("--timeout", c.timeout_s, "Seconds a collective may take")->capture_default_str();
  cmd->add_flag("--breakdown", c.breakdown,
                "With --no-cuda-graphs: also time forward, backward, all-reduce and optimizer with CUDA events");
  cmd->add_flag("--json", f->json, "Print one JSON object instead of the table");
  cmd->add_option("--result-file", c.result_file, "(internal) where a worker group's rank 0 writes its result")
      ->group("");
  cmd->callback([f, &exit_code] { exit_code.value = runBench(*f); });
}

}  // namespace dtrain::cli
