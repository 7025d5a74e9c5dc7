// LoRA end to end as real processes: `dtrain train --init-from DIR
// --lora-rank 4` on a tiny llama (a Hugging Face directory written here)
// trains its adapters alone (the loss falls; the checkpoint holds adapters
// and their optimizer state, and names the base), resumes from its
// checkpoint and refuses other adapters; `dtrain checkpoint export
// --merge-lora` (safetensors and --format hf) writes weights that are the
// base bit for bit except W + (alpha / r) B A on the adapted layers, whose
// logits are the adapted model's.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "dtrain/checkpoint.h"
#include "models/hf_checkpoint.h"
#include "models/language_model.h"
#include "models/safetensors.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain {
namespace {

using testing::CommandResult;
using testing::contains;
using testing::dtrainBin;
using testing::runCommand;
using testing::TempDir;

models::LanguageModelConfig loraLlama() {
  models::LanguageModelOverrides o;
  o.layers = 2;
  o.dim = 32;
  o.heads = 4;
  o.kv_heads = 2;
  o.seq_len = 16;
  o.vocab_size = 64;
  o.tie_embeddings = false;
  return models::namedLanguageModel("llama", o);
}

const std::string kLoraTargets = "q,k,v,o,gate,up,down";

std::string trainLoraProcess(const std::string& base, const std::string& ckpt, const std::string& extra,
                      const std::string& alpha = "8") {
  return "env -u RANK -u WORLD_SIZE " + dtrainBin() + " train --init-from " + base +
         " --lora-rank 4 --lora-alpha " + alpha + " --lora-targets " + kLoraTargets +
         " --dataset synthetic --synthetic-samples 256 --seq-len 16 --batch-size 8 --lr 1e-2 --warmup-steps 0 "
         "--schedule constant --seed 3 --progress none --checkpoint-dir " + ckpt + " " + extra + " 2>&1";
}

// The mean loss of the first and of the last `n` step records.
std::pair<double, double> firstAndLastLoraLoss(const std::string& jsonl, size_t n) {
  std::vector<double> losses;
  std::ifstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record["event"] == "step") losses.push_back(record["loss"].get<double>());
  }
  if (losses.size() < 2 * n) return {0, 0};
  double first = 0, last = 0;
  for (size_t i = 0; i < n; ++i) {
    first += losses[i] / static_cast<double>(n);
    last += losses[losses.size() - 1 - i] / static_cast<double>(n);
  }
  return {first, last};
}

// The adapted model of a checkpoint: the base from `base`, the adapters read in.
std::shared_ptr<models::LanguageModel> adaptedLlama(const std::string& base, const CheckpointReader& reader) {
  auto model = models::createLanguageModel(loraLlama());
  models::loadHfWeights(*model, base);
  model->addLora({4, 8, models::parseLoraTargets(kLoraTargets)});
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    if (item.value().requires_grad()) item.value().copy_(reader.readTensor("model.param." + item.key()));
  }
  return model;
}

TEST(LoraCliTest, TrainsOnlyAdaptersResumesAndExportsMergedWeights) {
  TempDir dir("dtrain-lora-cli");
  const std::string base = dir / "base", ckpt = dir / "ckpt";
  torch::manual_seed(11);
  auto base_model = models::createLanguageModel(loraLlama());
  models::exportHf(*base_model, base);

  CommandResult r =
      runCommand(trainLoraProcess(base, ckpt, "--max-steps 40 --log-every 1 --metrics-jsonl " + (dir / "m.jsonl")),
                 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "with LoRA adapters (rank 4, alpha 8, " + kLoraTargets + "; the rest frozen)"))
      << r.output;
  const auto [first, last] = firstAndLastLoraLoss(dir / "m.jsonl", 5);
  EXPECT_LT(last, first - 0.1) << "the loss did not fall: " << first << " -> " << last;

  // The checkpoint: adapters, their optimizer state, the base named.
  const CheckpointReader reader(ckpt + "/ckpt-000000040");
  int adapters = 0, state = 0;
  for (const CheckpointTensorInfo& t : reader.tensors()) {
    if (t.name.rfind("model.param.", 0) == 0) {
      EXPECT_TRUE(contains(t.name, ".lora_A") || contains(t.name, ".lora_B")) << t.name << " is no adapter";
      ++adapters;
    }
    if (t.name.rfind("optimizer.adamw.exp_avg.", 0) == 0) {
      EXPECT_TRUE(contains(t.name, ".lora_")) << t.name;
      ++state;
    }
  }
  EXPECT_EQ(adapters, 2 * 7 * 2);
  EXPECT_EQ(state, adapters);
  EXPECT_EQ(reader.meta()["lora"]["init_from"], base);
  EXPECT_EQ(reader.meta()["lora"]["targets"], kLoraTargets);

  // Merged: the base's tensors bit for bit where no adapter is, W + 2 B A where one is.
  CommandResult e = runCommand(dtrainBin() + " checkpoint export " + ckpt + " --merge-lora --out " +
                                   (dir / "merged.safetensors") + " 2>&1",
                               120);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  auto adapted = adaptedLlama(base, reader);
  auto base_params = base_model->named_parameters();
  int adapted_weights = 0;
  for (const auto& [name, merged] : models::readSafetensors(dir / "merged.safetensors").tensors) {
    const torch::Tensor original = base_params[name];
    const std::string layer = name.substr(0, name.rfind('.'));
    if (reader.find("model.param." + layer + ".lora_A") == nullptr) {
      EXPECT_TRUE(torch::equal(merged, original)) << name << " is not the base's";
      continue;
    }
    const torch::Tensor a = reader.readTensor("model.param." + layer + ".lora_A");
    const torch::Tensor b = reader.readTensor("model.param." + layer + ".lora_B");
    EXPECT_GT(b.abs().max().item<double>(), 0) << layer << "'s B did not train";
    EXPECT_LE((merged - original - 2 * b.mm(a)).abs().max().item<double>(), 1e-6) << name;
    ++adapted_weights;
  }
  EXPECT_EQ(adapted_weights, 2 * 7);

  // Their logits, and those of the Hugging Face export, are the adapted model's.
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::randint(64, {2, 16});
  const torch::Tensor want = adapted->forward(tokens);
  auto merged = models::createLanguageModel(loraLlama());
  models::loadModuleSafetensors(*merged, dir / "merged.safetensors");
  EXPECT_LE((merged->forward(tokens) - want).abs().max().item<double>(), 1e-5 * want.abs().max().item<double>());
  e = runCommand(
      dtrainBin() + " checkpoint export " + ckpt + " --merge-lora --format hf --out " + (dir / "hf") + " 2>&1", 120);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  auto from_hf = models::createLanguageModel(loraLlama());
  models::loadHfWeights(*from_hf, dir / "hf");
  EXPECT_LE((from_hf->forward(tokens) - want).abs().max().item<double>(), 1e-5 * want.abs().max().item<double>());
  e = runCommand(dtrainBin() + " checkpoint export " + ckpt + " --format hf --out " + (dir / "hf2") + " 2>&1", 120);
  EXPECT_EQ(e.exit_code, 2) << e.output;
  EXPECT_TRUE(contains(e.output, "--format hf exports one with --merge-lora")) << e.output;

  // Resumed from its checkpoint; other adapters are refused.
  r = runCommand(trainLoraProcess(base, ckpt, "--max-steps 44 --resume auto"), 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "resumed at step 40")) << r.output;
  r = runCommand(trainLoraProcess(base, ckpt, "--max-steps 48 --resume auto", "4"), 300);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "field 'lora': the checkpoint's LoRA adapters are alpha '8'")) << r.output;
}

}  // namespace
}  // namespace dtrain
