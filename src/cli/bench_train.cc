// `dtrain bench train`: training throughput and scaling on synthetic data
// resident on the GPUs, the step `dtrain train` runs (CUDA graphs by default).
//
//   dtrain bench train --gpus 1,2,4 --model resnet50 --image-size 32 --batch-size 64
//
// With --gpus it starts one group per GPU count (`dtrain launch --standalone
// --nproc-per-node G`) and prints one row per count: samples/s, step time and
// scaling efficiency against the first count. Under a launcher (WORLD_SIZE
// set) without --gpus it measures the group it runs in.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/option_binding.h"
#include "cli/training_runtime.h"
#include "common/env.h"
#include "common/error.h"
#include "common/host.h"
#include "common/process.h"
#include "train/train_options.h"

namespace dtrain::cli {
namespace {

struct BenchTrainCli {
  BenchTrainOptions bench;
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

void declareBenchTrainCli(OptionSet& set, BenchTrainCli& o) {
  set.text("--gpus", o.gpus,
           "GPU counts to run, e.g. 1,2,4: one `dtrain launch --standalone` group each (default: 1, or the "
           "launcher's group when WORLD_SIZE is set)")
      .check(
          [](const std::string& text) {
            if (!text.empty()) parseGpuList(text);
            return std::string();
          },
          "a list of GPU counts like 1,2,4")
      .notForwarded();
  declareBenchTrainOptions(set, o.bench);
  set.toggle("--json", o.json, "Print one JSON object instead of the table").notForwarded();
}

std::string describe(const BenchTrainOptions& c) {
  std::ostringstream out;
  out << c.model.name;
  if (isLanguageModel(c.model)) {
    const models::LanguageModelConfig lm = languageModelConfig(c.model);
    out << " (" << lm.layers << " layers, dim " << lm.dim << ", vocab " << lm.vocab_size << "), seq " << lm.seq_len
        << ", batch " << c.input.batch_size << "/GPU, " << computePrecisionName(c.execution.precision) << ", AdamW";
    if (c.clip_grad_norm > 0) out << ", clip " << c.clip_grad_norm;
  } else {
    if (c.model.name.rfind("resnet", 0) == 0) out << " (" << stemName(c.model.stem) << " stem)";
    out << ", " << c.input.channels << "x" << c.input.image_size << "x" << c.input.image_size << ", batch "
        << c.input.batch_size << "/GPU, " << computePrecisionName(c.execution.precision) << ", "
        << (c.model.channels_last ? "channels-last" : "NCHW") << ", cudnn.benchmark "
        << (c.execution.cudnn_benchmark ? "on" : "off");
  }
  out << ", " << (c.execution.cuda_graphs ? "CUDA graphs" : "eager") << ", " << c.steps << " steps after "
      << c.warmup << " warm-up";
  return out.str();
}

// A language model's row: tokens/s, MFU and peak memory besides step time.
void printLanguageModelRows(const std::vector<nlohmann::json>& rows) {
  std::printf("#%6s %12s %10s %7s %9s %11s %10s  %s\n", "gpus", "tokens/s", "step_ms", "MFU", "scaling",
              "memory_GiB", "loss", "graphs");
  for (const auto& r : rows) {
    char mfu[16] = "    n/a";
    if (r.contains("mfu")) std::snprintf(mfu, sizeof(mfu), "%6.1f%%", 100.0 * r["mfu"].get<double>());
    std::printf(" %6d %12.0f %10.3f %7s %8.1f%% %11.2f %10.4f  %s\n", r["gpus"].get<int>(),
                r["tokens_per_s"].get<double>(), r["step_ms"].get<double>(), mfu,
                100.0 * r["scaling_efficiency"].get<double>(), r.value("peak_memory_bytes", int64_t{0}) / 1073741824.0,
                r["loss"].get<double>(), r["graphs"].get<std::string>().c_str());
  }
}

void printTable(const BenchTrainOptions& c, const std::vector<nlohmann::json>& rows) {
  std::printf("# dtrain bench train: %s\n", describe(c).c_str());
  if (!rows.empty() && rows.front().contains("versions")) {
    const auto& v = rows.front()["versions"];
    std::printf("# %s\n", v.dump().c_str());
  }
  if (isLanguageModel(c.model)) {
    printLanguageModelRows(rows);
    if (!rows.empty() && rows.front().contains("fp8_flops_share")) {
      std::printf("# fp8: %.1f%% of the FLOPs ran in FP8 products (the blocks' linear layers); MFU is against the "
                  "GPU's bf16 peak\n", 100.0 * rows.front()["fp8_flops_share"].get<double>());
    }
  } else {
    std::printf("#%6s %12s %10s %9s %10s  %s\n", "gpus", "samples/s", "step_ms", "scaling", "loss", "graphs");
    for (const auto& r : rows) {
      std::printf(" %6d %12.1f %10.3f %8.1f%% %10.4f  %s\n", r["gpus"].get<int>(),
                  r["samples_per_s"].get<double>(), r["step_ms"].get<double>(),
                  100.0 * r["scaling_efficiency"].get<double>(), r["loss"].get<double>(),
                  r["graphs"].get<std::string>().c_str());
    }
  }
  for (const auto& r : rows) {
    if (r.contains("breakdown")) std::printf("#   time split (eager, ms): %s\n", r["breakdown"].dump().c_str());
  }
}

nlohmann::json jsonReport(const BenchTrainOptions& c, const std::vector<nlohmann::json>& rows) {
  nlohmann::json out;
  out["bench"] = "train";
  out["config"] = {{"model", c.model.name},
                   {"stem", stemName(c.model.stem)},
                   {"language_model", isLanguageModel(c.model)},
                   {"image_size", c.input.image_size},
                   {"batch_size", c.input.batch_size},
                   {"precision", computePrecisionName(c.execution.precision)},
                   {"channels_last", c.model.channels_last},
                   {"steps", c.steps},
                   {"warmup", c.warmup},
                   {"cuda_graphs", c.execution.cuda_graphs},
                   {"cudnn_benchmark", c.execution.cudnn_benchmark}};
  out["results"] = rows;
  return out;
}

// One `dtrain launch --standalone` group of `gpus` workers; its rank 0's row.
std::optional<nlohmann::json> runGroup(const BoundOptions<BenchTrainCli>& bound, int gpus,
                                       const std::filesystem::path& dir, int& status) {
  const std::string self = selfExecutablePath();
  const std::string result_file = (dir / ("gpus-" + std::to_string(gpus) + ".json")).string();
  std::vector<std::string> args = {self, "launch", "--standalone", "--nproc-per-node", std::to_string(gpus),
                                   self, "bench",  "train"};
  for (std::string& a : bound.set.arguments()) args.push_back(std::move(a));
  args.push_back("--result-file");
  args.push_back(result_file);
  const int rc = runProcess(args).exitCode();
  std::ifstream in(result_file);
  if (rc != 0 || !in) {
    std::fprintf(stderr, "dtrain bench train: the %d-GPU run failed (exit code %d)\n", gpus, rc);
    status = rc != 0 ? rc : 1;
    return std::nullopt;
  }
  return nlohmann::json::parse(in);
}

int runBench(const BoundOptions<BenchTrainCli>& bound) {
  const BenchTrainCli& f = bound.options;
  const bool in_a_group = envString("WORLD_SIZE").has_value();
  auto run_worker = trainingRuntime<int (*)(const BenchTrainOptions*)>("dtrain_run_bench_train");
  if (f.gpus.empty() && in_a_group) return run_worker(&f.bench);  // one row, this group

  const std::vector<int> counts = parseGpuList(f.gpus.empty() ? "1" : f.gpus);
  const std::filesystem::path dir(makeTemporaryDirectory("dtrain-bench-train"));
  std::vector<nlohmann::json> rows;
  int status = 0;
  for (int g : counts) {
    std::optional<nlohmann::json> row = runGroup(bound, g, dir, status);
    if (!row) break;
    const double base = rows.empty() ? (*row)["samples_per_s"].get<double>() / g
                                     : rows.front()["samples_per_s"].get<double>() / rows.front()["gpus"].get<int>();
    (*row)["scaling_efficiency"] = (*row)["samples_per_s"].get<double>() / (base * g);
    rows.push_back(std::move(*row));
  }
  std::filesystem::remove_all(dir);
  if (f.json) {
    std::cout << jsonReport(f.bench, rows).dump() << std::endl;
  } else {
    printTable(f.bench, rows);
  }
  return status;
}

}  // namespace

void registerBenchTrain(CLI::App& bench, ExitCode& exit_code) {
  CLI::App* cmd = bench.add_subcommand(
      "train", "Training throughput and scaling on synthetic data resident on the GPUs (samples/s, step time, "
               "scaling efficiency against the first GPU count)");
  auto bound = bindNew<BenchTrainCli>(*cmd, "dtrain bench train", declareBenchTrainCli);
  cmd->callback([bound, &exit_code] { exit_code.value = runBench(*bound); });
}

}  // namespace dtrain::cli
