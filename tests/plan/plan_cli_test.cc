// `dtrain plan` end to end: the table and its JSON, the best layout's
// command line run as printed (a tiny llama on 4 CPU ranks, synthetic data
// in place of the text corpus), and every bad input an exit 2 naming it.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

namespace dtrain::testing {
namespace {

const std::string kTiny = " plan --model llama --layers 4 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 128 --vocab-size 512"
                          " --seq-len 64 --gpus 4 --gpu h100 --tokens-per-step 2048";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(PlanCliTest, TheLayoutsFitAndTheBestRunsAsPrinted) {
  const CommandResult r = runCommand(dtrainBin() + kTiny + " --train-tokens 1e9 --price on-demand=3,spot=1.5 --json", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_FALSE(j["layouts"].empty());
  EXPECT_GT(j["refused"].get<int>(), 0) << "tp 4 over 2 key/value heads, ... are dtrain train's refusals";
  double last = 0;
  for (const auto& layout : j["layouts"]) {
    EXPECT_LE(layout["memory_gib_per_gpu"].get<double>(), 79.6);
    EXPECT_GE(layout["step_s"].get<double>(), last) << "fastest first";
    last = layout["step_s"].get<double>();
    EXPECT_NEAR(layout["cost"]["spot"].get<double>(), layout["gpu_hours"].get<double>() * 1.5, 1e-6);
  }
  // The fastest, run as printed for 2 steps (the corpus swapped for synthetic tokens).
  std::string command = j["layouts"][0]["command"].get<std::string>();
  ASSERT_EQ(command.rfind("dtrain launch --nnodes 1 --nproc-per-node 4 --standalone dtrain train ", 0), 0) << command;
  command = replaced(replaced(command, "dtrain train", dtrainBin() + " train"), "dtrain launch", dtrainBin() + " launch");
  command = replaced(command, "--dataset text", "--dataset synthetic");
  const CommandResult run = runCommand(command + " --max-steps 2 --progress none 2>&1", 240);
  ASSERT_EQ(run.exit_code, 0) << command << "\n" << run.output;
  EXPECT_NE(run.output.find("2 steps"), std::string::npos) << run.output;

  const CommandResult table = runCommand(dtrainBin() + kTiny + " --capex 100000 --power-kw-per-node 8 "
                                         "--electricity-price 0.12 --price on-demand=3 --train-tokens 1e9 2>&1", 60);
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("| # | layout | GiB/GPU | tokens/s | MFU | time | GPU-hours | on-demand | owned |"),
            std::string::npos) << table.output;
  EXPECT_NE(table.output.find("8410 power"), std::string::npos) << "8 kW x $0.12 x 8,760 h: " << table.output;
  EXPECT_NE(table.output.find("owning is cheaper above"), std::string::npos) << table.output;
}

// --fp8-recipe rowwise is priced at its own measured speed (below
// tensorwise's, above bf16's) and carried into the command line.
TEST(PlanCliTest, RowwiseFp8IsPricedAtItsOwnSpeed) {
  auto fastest = [](const std::string& flags) {
    const CommandResult r = runCommand(dtrainBin() + kTiny + flags + " --json", 60);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    return j["layouts"][0];
  };
  const nlohmann::json bf16 = fastest(""), tensorwise = fastest(" --precision fp8"),
                       rowwise = fastest(" --precision fp8 --fp8-recipe rowwise");
  EXPECT_LT(bf16["tokens_per_s"].get<double>(), rowwise["tokens_per_s"].get<double>());
  EXPECT_LT(rowwise["tokens_per_s"].get<double>(), tensorwise["tokens_per_s"].get<double>());
  const std::string command = rowwise["command"].get<std::string>();
  EXPECT_NE(command.find("--precision fp8 --fp8-recipe rowwise"), std::string::npos) << command;
  EXPECT_EQ(tensorwise["command"].get<std::string>().find("--fp8-recipe"), std::string::npos);
}

// GiB/GPU is the estimate of the allocator's peak, the figure `dtrain bench
// train` measures: gpt2-124m at seq 1024, micro-batch 16 on one H200 within
// 10% of the 6.94 GiB measured (docs/sizing.md); the margin a layout must
// fit with (1 GiB + 5% of the 140.4 GiB) is beside it, not in it.
TEST(PlanCliTest, MemoryPerGpuIsTheEstimateOfTheAllocatorsPeak) {
  const CommandResult r = runCommand(dtrainBin() + " plan --model gpt2-124m --gpus 1 --gpu h200 --seq-len 1024"
                                     " --tokens-per-step 16384 --top 1000 --json", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  int found = 0;
  for (const auto& l : j["layouts"]) {
    if (l["tp"] != 1 || l["pp"] != 1 || l["micro_batch"] != 16 || l["microbatches"] != 1 ||
        l["activation_checkpointing"].get<bool>() ||
        l["layout"].get<std::string>().find("shard none,") == std::string::npos) {
      continue;
    }
    ++found;
    const double gib = l["memory_gib_per_gpu"].get<double>();
    EXPECT_NEAR(gib / 6.94, 1.0, 0.10) << gib;
    EXPECT_NEAR(l["memory_needed_gib_per_gpu"].get<double>() - gib, 1 + 0.05 * 140.4, 0.01);
  }
  EXPECT_EQ(found, 1) << r.output;
  const CommandResult table = runCommand(dtrainBin() + " plan --model gpt2-124m --gpus 1 --gpu h200 --seq-len 1024"
                                         " --tokens-per-step 16384 2>&1", 60);
  EXPECT_NE(table.output.find("memory: dtrain's estimate of the allocator's peak, which fits with a 1 GiB + 5% margin"),
            std::string::npos) << table.output;
}

// A calibration file (what --calibrate writes) sets the efficiency and bus
// bandwidth of plans for its GPU, flags over it; one for another GPU is
// named and left alone; a broken one is an exit 2 naming it; --calibrate
// on a machine without NVIDIA GPUs says so and writes nothing.
TEST(PlanCliTest, ACalibrationFileSetsTheConstantsOfItsGpu) {
  TempDir dir("dtrain-plan-calibration");
  const auto write = [&](const std::string& name, const nlohmann::json& j) {
    std::ofstream(dir / name) << j.dump();
    return dir / name;
  };
  const nlohmann::json h100 = {{"gpu", "h100"}, {"gpu_name", "NVIDIA H100 80GB HBM3"}, {"gpus", 8},
                               {"efficiency", 0.9}, {"intra_node_gbs", 100.0}, {"host", "node7"},
                               {"date", "2026-12-02T10:00:00Z"}};
  const std::string own = write("h100.json", h100);
  const auto plan = [&](const std::string& args) {
    const CommandResult r = runCommand(dtrainBin() + kTiny + " --json " + args + " 2>&1", 60);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
    return r.exit_code == 0 ? nlohmann::json::parse(r.output) : nlohmann::json::object();
  };
  const nlohmann::json calibrated = plan("--calibration " + own);
  EXPECT_EQ(calibrated["efficiency"].get<double>(), 0.9);
  EXPECT_TRUE(calibrated["calibration"]["used"].get<bool>());
  EXPECT_EQ(calibrated["calibration"]["host"], "node7");
  const nlohmann::json flagged = plan("--calibration " + own + " --efficiency 0.45");
  EXPECT_EQ(flagged["efficiency"].get<double>(), 0.45) << "--efficiency over the file";
  EXPECT_GT(calibrated["layouts"][0]["tokens_per_s"].get<double>(), flagged["layouts"][0]["tokens_per_s"].get<double>());

  nlohmann::json h200 = h100;
  h200["gpu"] = "h200";
  const nlohmann::json other = plan("--calibration " + write("h200.json", h200));
  EXPECT_EQ(other["efficiency"].get<double>(), 0.6) << "the default";
  EXPECT_FALSE(other["calibration"]["used"].get<bool>());
  EXPECT_EQ(other["calibration"]["why"], "it is for h200, not h100");
  const CommandResult table = runCommand(dtrainBin() + kTiny + " --calibration " + own + " 2>&1", 60);
  EXPECT_NE(table.output.find("# constants: calibrated: efficiency 0.900, all-reduce 100 GB/s from " + own),
            std::string::npos) << table.output;

  // A file that names its measurement is fitted again by this build's
  // step model (its memory term taken out of the measured step).
  nlohmann::json measured = h100;
  measured.update({{"model", "llama-1b"}, {"seq_len", 2048}, {"batch_size", 4}, {"tokens_per_s", 20000.0},
                   {"efficiency", 0.5}});
  const nlohmann::json refit = plan("--calibration " + write("measured.json", measured));
  EXPECT_EQ(refit["calibration"]["efficiency_in_file"].get<double>(), 0.5);
  EXPECT_GT(refit["efficiency"].get<double>(), 0.1);
  EXPECT_LT(refit["efficiency"].get<double>(), 0.5) << "20,000 tokens/s of llama-1b on an H100, products alone";
  EXPECT_EQ(refit["calibration"]["efficiency"].get<double>(), refit["efficiency"].get<double>());

  nlohmann::json broken = h100;
  broken["efficiency"] = 3;
  const std::string bad = write("bad.json", broken);
  CommandResult r = runCommand(dtrainBin() + kTiny + " --calibration " + bad + " 2>&1", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("calibration " + bad + ": \"efficiency\" must be a number from 0.01 to 1"),
            std::string::npos) << r.output;
  r = runCommand(dtrainBin() + kTiny + " --calibration " + (dir / "missing.json") + " 2>&1", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no such file; write it with --calibrate"), std::string::npos) << r.output;
  r = runCommand("env -u LD_LIBRARY_PATH " + dtrainBin() + " plan --calibrate --calibration " + (dir / "new.json") +
                     " 2>&1", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("measures this machine's NVIDIA GPUs, and finds none"), std::string::npos) << r.output;
  EXPECT_FALSE(std::ifstream(dir / "new.json").good()) << "nothing written";
}

TEST(PlanCliTest, BadInputIsAnExitTwoNamingIt) {
  const struct {
    std::string args, says;
  } cases[] = {
      {kTiny + " --gpu v100", "--gpu 'v100' is not in dtrain's table of GPUs"},
      {kTiny + " --price on-demand=-2", "--price 'on-demand=-2': expected NAME=PRICE with a price >= 0"},
      {kTiny + " --price spot", "--price 'spot'"},
      {kTiny + " --gpu a100-40g --precision fp8", "the a100-40g has no FP8 tensor cores"},
      {kTiny + " --fp8-recipe rowwise", "this plan's precision is bf16 (add --precision fp8 or drop --fp8-recipe)"},
      {kTiny + " --gpu l40s --precision fp8 --fp8-recipe rowwise", "the l40s has 8.9"},
      {kTiny + " --capex 1000", "--capex needs --power-kw-per-node"},
      {" plan --model llama-8b --gpus 1 --gpu a100-40g --seq-len 2048 --tokens-per-step 1048576",
       "it needs about 4 GPUs (1 x 4)"},
      {" plan --model resnet50 --gpus 8", "--model resnet50: dtrain plan sizes language models"},
      {" plan --gpus 8", "needs --model"},
  };
  for (const auto& c : cases) {
    const CommandResult r = runCommand(dtrainBin() + c.args + " 2>&1", 120);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace dtrain::testing
