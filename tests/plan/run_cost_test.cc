// dtrain plan's arithmetic (plan/run_cost.h, plan/step_model.h,
// plan/gpu_catalog.h): seed 003's cost of owning 10 DGX A100 to the
// dollar, the break-even utilisation, and the step model's parts.
#include <gtest/gtest.h>

#include "common/error.h"
#include "models/lm_config.h"
#include "models/lm_counts.h"
#include "plan/calibration.h"
#include "plan/gpu_catalog.h"
#include "plan/memory_estimate.h"
#include "plan/run_cost.h"
#include "plan/step_model.h"

namespace dtrain::plan {
namespace {

// Seed 003, section 5: 10 DGX A100 nodes at 8 kW each and $0.12 per kWh.
OnPremises seed003() {
  OnPremises site;
  site.capex_per_node = 199000;  // a DGX A100's list price
  site.power_kw_per_node = 8;
  site.electricity_per_kwh = 0.12;
  site.maintenance_per_node_year = 20000;
  site.years = 3;
  site.utilization = 0.7;
  return site;
}

TEST(RunCostTest, Seed003sPowerBillAndOwnershipToTheDollar) {
  const Tco t = ownershipCost(seed003(), 10, 8);
  EXPECT_DOUBLE_EQ(t.power_per_year, 84096.0) << "8 kW x $0.12/kWh x 8,760 h x 10 nodes";
  EXPECT_DOUBLE_EQ(t.capex, 1990000.0);
  EXPECT_DOUBLE_EQ(t.maintenance_per_year, 200000.0);
  EXPECT_DOUBLE_EQ(t.total, 1990000.0 + 3 * (84096.0 + 200000.0));
  // 80 GPUs x 8,760 h x 3 years x 70%.
  EXPECT_NEAR(t.per_gpu_hour, t.total / (80 * 8760 * 3 * 0.7), 1e-9);
}

TEST(RunCostTest, OwningCostsWhatRentingDoesAtTheBreakEvenUtilisation) {
  OnPremises site = seed003();
  const double price = 2.5;
  const double u = breakEvenUtilization(site, 10, 8, price);
  EXPECT_GT(u, 0);
  EXPECT_LT(u, 1);
  site.utilization = u;
  EXPECT_NEAR(ownershipCost(site, 10, 8).per_gpu_hour, price, 1e-9);
  EXPECT_GT(breakEvenUtilization(site, 10, 8, 0.1), 1) << "a price that low is never beaten";
}

TEST(GpuCatalogTest, NamesAndRefusals) {
  EXPECT_EQ(gpuByName("H100-SXM").name, "h100");
  EXPECT_EQ(gpuByName("A100").name, "a100-80g");
  EXPECT_GT(gpuByName("h200").memory_gib, 140);
  EXPECT_EQ(gpuByName("a100-40g").fp8_tflops, 0) << "no FP8 tensor cores";
  try {
    gpuByName("v100");
    FAIL() << "an unknown GPU is refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("--gpu 'v100' is not in dtrain's table"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("h100, h200"), std::string::npos) << e.message();
  }
}

models::LanguageModelConfig llamaAt2048(const std::string& name) {
  models::LanguageModelOverrides o;
  o.seq_len = 2048;
  return models::namedLanguageModel(name, o);
}

Cluster oneNode(const std::string& gpu, int gpus) {
  Cluster c;
  c.gpu = gpuByName(gpu);
  c.nodes = 1;
  c.gpus_per_node = gpus;
  return c;
}

// The memory term: bytes over 80% of the GPU's bandwidth, added to the
// products' time; the efficiency --calibrate fits gives back the measured
// speed; the optimizer's pass is AdamW's 28 bytes a parameter.
TEST(StepModelTest, TheMemoryTermAddsItsBytesAtTheGpusBandwidthAndCalibrationInvertsIt) {
  const models::LanguageModelConfig llama = llamaAt2048("llama-1b");
  Cluster c = oneNode("h200", 1);
  const Layout one{1, 1, 1, ShardStage::kNone, 4, 1, false, false};
  const int64_t tokens = 4 * 2048;
  const StepTime plain = predictStep(llama, c, one, tokens);
  const StepTime with = predictStep(llama, c, one, tokens, 40e9);
  EXPECT_NEAR(with.memory_s, 40e9 / (4.8e12 * kHbmEfficiency), 1e-12);
  EXPECT_NEAR(with.step_s, plain.step_s + with.memory_s, 1e-12);
  c.efficiency = fittedEfficiency(llama, c.gpu, tokens, 40e9, 60000);
  EXPECT_NEAR(predictStep(llama, c, one, tokens, 40e9).tokens_per_s, 60000, 1e-6);
  EXPECT_GT(c.efficiency, fittedEfficiency(llama, c.gpu, tokens, 0, 60000)) << "the products get the rest of the step";

  MemoryInputs in;
  in.parameters = models::parameterCount(llama);
  in.optimizer_state_bytes = 8;
  const double optimizer = static_cast<double>(estimateMemory(in).optimizer);
  EXPECT_NEAR(stepTrafficBytes(in, one), optimizer / 8 * 28, 1) << "AdamW: state, fp32 parameters, gradients";
  in.lm = &llama;
  in.tokens = tokens;
  in.precision = ComputePrecision::kBf16;
  const double blocks = static_cast<double>(llama.layers) * tokens * blockActivationBytesPerToken(in) * 4;
  const double logits = static_cast<double>(tokens) * models::fusedHeadPaddedVocab(llama.vocab_size) * 2 * 4;
  EXPECT_NEAR(stepTrafficBytes(in, one), optimizer / 8 * 28 + blocks + logits, 1e3);
  Layout accumulated = one;
  accumulated.microbatches = 2;
  EXPECT_NEAR(stepTrafficBytes(in, accumulated), optimizer / 8 * 28 + 2 * (blocks + logits), 1e3)
      << "each micro-batch moves its activations and logits, the optimizer runs once";
}

TEST(StepModelTest, ComputeBubbleAndCommunication) {
  const models::LanguageModelConfig llama = llamaAt2048("llama-8b");
  Cluster c = oneNode("h100", 8);
  const int64_t tokens = int64_t{1} << 22;
  Layout dp8{1, 1, 8, ShardStage::kNone, 1, 256, false, false};
  const StepTime a = predictStep(llama, c, dp8, tokens);
  const double flops = models::trainingFlopsPerToken(llama, 2048) * static_cast<double>(tokens);
  EXPECT_NEAR(a.compute_s, flops / (8 * 989.4e12 * kDefaultEfficiency), 1e-9);
  EXPECT_NEAR(a.data_s, 2 * 7.0 / 8 * 4 * static_cast<double>(models::parameterCount(llama)) / 353e9, 1e-9);
  EXPECT_EQ(a.exposed_s, 0) << "the gradients' reduction hides under a long backward";
  EXPECT_NEAR(a.mfu, kDefaultEfficiency, 1e-9);
  Layout checkpointed = dp8;
  checkpointed.activation_checkpointing = true;
  EXPECT_NEAR(predictStep(llama, c, checkpointed, tokens).compute_s, a.compute_s * 4 / 3, 1e-9);
  // A pipeline of 4 stages and 16 micro-batches idles (p - 1) / (M + p - 1) of its time.
  Layout pp4{1, 4, 2, ShardStage::kNone, 1, 16, false, false};
  const StepTime p = predictStep(llama, c, pp4, int64_t{2} * 16 * 2048);
  EXPECT_NEAR(p.bubble_s / (p.compute_s + p.bubble_s), 3.0 / 19.0, 1e-9);
  // Across nodes the data-parallel group's bandwidth is the network's.
  Cluster two = c;
  two.nodes = 2;
  Layout dp16 = dp8;
  dp16.dp = 16;
  EXPECT_NEAR(predictStep(llama, two, dp16, tokens).data_s, 2 * 15.0 / 16 * 4 *
                  static_cast<double>(models::parameterCount(llama)) / (two.inter_node_gbs * 1e9), 1e-9);
}

// NVIDIA's device names (nvidia-smi's, NVML's) to the catalog; a
// calibration round-trips through its JSON; a field out of range is named.
TEST(CalibrationTest, NamesMapAndTheFileRoundTrips) {
  EXPECT_EQ(catalogNameOf("NVIDIA H200"), "h200");
  EXPECT_EQ(catalogNameOf("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(catalogNameOf("NVIDIA A100-SXM4-40GB"), "a100-40g");
  EXPECT_EQ(catalogNameOf("NVIDIA A100-SXM4-80GB"), "a100-80g");
  EXPECT_EQ(catalogNameOf("NVIDIA L40S"), "l40s");
  EXPECT_EQ(catalogNameOf("Tesla V100-SXM2-32GB"), "");
  Calibration c;
  c.gpu = "h200";
  c.gpu_name = "NVIDIA H200";
  c.gpus = 4;
  c.efficiency = 0.5;
  c.intra_node_gbs = 353;
  c.tokens_per_s = 60426;
  const Calibration back = calibrationFromJson(calibrationJson(c), "f.json");
  EXPECT_EQ(calibrationJson(back), calibrationJson(c));
  nlohmann::json broken = calibrationJson(c);
  broken["intra_node_gbs"] = "fast";
  try {
    calibrationFromJson(broken, "f.json");
    ADD_FAILURE() << "a string bandwidth was taken";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("calibration f.json: \"intra_node_gbs\" must be a number"), std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace dtrain::plan
