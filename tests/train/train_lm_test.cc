// `dtrain train` on language models, end to end as real processes: a small
// GPT on the embedded corpus converges to the validation loss the PyTorch
// reference reaches with the same data order and hyper-parameters; a
// SIGKILLed rank resumes to bitwise-equal parameters; gradient accumulation
// to --tokens-per-step; language-model units in the reports; bad input.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/checkpoint_view.h"
#include "tests/support/bad_input.h"
#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain {
namespace {
using testing::BadCommandLine;
using testing::contains;
using testing::dtrainBin;
using testing::freePort;
using testing::readCheckpoint;
using testing::runCommand;
using testing::sourceDir;
using testing::TempDir;

// A small GPT on the embedded corpus, byte-level tokens (vocab 257 in 320 rows).
const std::string kSmallGpt = "--model gpt2 --layers 2 --dim 64 --heads 4 --seq-len 64 --vocab-size 320 "
                              "--dataset text --tokenizer byte --batch-size 16 --optimizer adamw --lr 1e-3 "
                              "--beta2 0.95 --weight-decay 0.1 --warmup-steps 20 --schedule cosine --min-lr 1e-4 "
                              "--clip-grad-norm 1.0 --eval-batches 20 --seed 3 ";

// The cache of the tokenized corpus, shared by the tests of this binary.
const std::string& corpusCache() {
  static const std::string dir = testing::makeTempDir("dtrain-lm-corpus");
  return dir;
}

std::string train(const std::string& args) {
  return "env -u RANK -u WORLD_SIZE " + dtrainBin() + " train --cache-dir " + corpusCache() + " " + args;
}

std::string launchLm(int ranks, const std::string& extra = "") {
  return dtrainBin() + " launch --nproc-per-node " + std::to_string(ranks) + " --master-port " +
         std::to_string(freePort()) + " --monitor-interval 0.1 " + extra + " " + dtrainBin() +
         " train --cache-dir " + corpusCache() + " ";
}

nlohmann::json lastLmRecord(const std::string& jsonl, const std::string& event) {
  std::ifstream in(jsonl);
  std::string line;
  nlohmann::json found;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line);
    if (record["event"] == event) found = record;
  }
  return found;
}

// The folder of the prepared corpus: the one fortunes-byte-* in the cache.
std::string corpusShards() {
  auto r = runCommand("ls -d " + corpusCache() + "/fortunes-byte-*", 10);
  std::string dir = r.output;
  while (!dir.empty() && (dir.back() == '\n' || dir.back() == ' ')) dir.pop_back();
  return dir;
}

TEST(TrainLmTest, SmallGptReachesTheValidationLossOfThePyTorchReference) {
  TempDir dir("dtrain-lm-converge");
  const int steps = 300;
  auto r = runCommand(train(kSmallGpt + "--max-steps " + std::to_string(steps) + " --log-every 50 " +
                            "--progress lines --metrics-jsonl " + (dir / "m.jsonl")),
                      600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json summary = lastLmRecord(dir / "m.jsonl", "summary");
  ASSERT_TRUE(summary.contains("val_loss")) << r.output;
  const double dtrain_loss = summary["val_loss"].get<double>();
  EXPECT_EQ(summary["steps"], steps);
  EXPECT_EQ(summary["tokens"], int64_t{steps} * 16 * 64);
  EXPECT_GT(summary["tokens_per_s"].get<double>(), 0);
  EXPECT_NEAR(summary["perplexity"].get<double>(), std::exp(dtrain_loss), 1e-6 * std::exp(dtrain_loss));
  EXPECT_TRUE(contains(r.output, "tokens/s")) << r.output;
  EXPECT_TRUE(contains(r.output, "dtrain train: val loss")) << r.output;
  EXPECT_LT(dtrain_loss, 3.0) << "a byte-level model that learned nothing sits near ln(257) = 5.5";

  const std::string shards = corpusShards();
  ASSERT_FALSE(shards.empty());
  auto reference = runCommand("/usr/bin/python3 " + sourceDir() + "/tests/train/lm_reference_train.py --shards " +
                                  shards + " --steps " + std::to_string(steps),
                              600);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const double torch_loss = nlohmann::json::parse(reference.output.substr(reference.output.rfind('{')))["val_loss"];
  std::printf("[ info ] validation loss after %d steps: dtrain %.4f, PyTorch %.4f\n", steps, dtrain_loss, torch_loss);
  EXPECT_NEAR(dtrain_loss, torch_loss, 0.02 * torch_loss);
}

// Killed or not, the same language-model job ends with the same bits.
TEST(TrainLmTest, KilledRankResumesFromCheckpointToBitwiseEqualParameters) {
  const std::string common = kSmallGpt + "--max-steps 60 --checkpoint-every 20 --log-every 10 --eval-steps 30 "
                                         "--progress lines --resume auto ";
  TempDir clean("dtrain-lm-clean"), killed("dtrain-lm-killed");
  auto a = runCommand(launchLm(2) + common + "--checkpoint-dir " + clean.path(), 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = runCommand("DTRAIN_FAULT_KILL_AT=1:30 " + launchLm(2, "--max-restarts 1") + common + "--checkpoint-dir " +
                          killed.path(),
                      300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "kills itself after step 30")) << b.output;
  EXPECT_TRUE(contains(b.output, "000000020")) << "should resume from step 20\n" << b.output;
  auto final_clean = readCheckpoint(clean / "ckpt-000000060");
  auto final_killed = readCheckpoint(killed / "ckpt-000000060");
  ASSERT_TRUE(final_clean.tensors.count("model.param.transformer.wte.weight"));
  EXPECT_EQ(final_clean.meta.at("model_config").at("layers"), "2");
  EXPECT_EQ(final_clean.meta.at("tokenizer").at("kind"), "byte");
  for (const auto& [key, tensor] : final_clean.tensors) {
    if (key.rfind("model.", 0) != 0 && key.rfind("optimizer.", 0) != 0) continue;
    ASSERT_TRUE(final_killed.tensors.count(key)) << key;
    EXPECT_TRUE(tensor == final_killed.tensors.at(key)) << key << " differs after the restart";
  }
}

// --tokens-per-step over 2 ranks x 4 sequences x 64 tokens = 4 micro-batches.
TEST(TrainLmTest, TokensPerStepAccumulatesMicroBatches) {
  TempDir dir("dtrain-lm-accumulate");
  auto r = runCommand(launchLm(2) + kSmallGpt + "--batch-size 4 --tokens-per-step 2048 --max-steps 24 --log-every 12 " +
                          "--progress lines --metrics-jsonl " + (dir / "m.jsonl"),
                      300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "2 rank(s) x batch 4 x 4 micro-batches")) << r.output;
  const nlohmann::json summary = lastLmRecord(dir / "m.jsonl", "summary");
  EXPECT_EQ(summary["tokens"], 24 * 2048) << summary.dump();
  const nlohmann::json eval = lastLmRecord(dir / "m.jsonl", "eval");
  EXPECT_TRUE(eval.contains("val_loss")) << "the run ended by --max-steps must still be evaluated";
}

// Left to their defaults, language models train with the GPT recipe and
// image models with SGD, and the start line says which; --shard over one
// rank shards nothing, says so, and runs unsharded.
TEST(TrainLmTest, DefaultsFollowTheModelKindAndOneRankIsNotSharded) {
  auto lm = runCommand(train("--model gpt2 --layers 2 --dim 32 --heads 4 --seq-len 32 --vocab-size 320 --dataset text "
                             "--tokenizer byte --batch-size 4 --progress none --max-steps 40 --shard full 2>&1"),
                       300);
  ASSERT_EQ(lm.exit_code, 0) << lm.output;
  // 0.03 M parameters: 6e-4 x (125M / N)^0.25 is above the 3e-3 cap.
  EXPECT_TRUE(contains(lm.output, ", adamw lr 0.003 (betas 0.9/0.95, weight decay 0.1, warm-up 5% of the steps (at "
                                  "most 2000), cosine to 0.0003), adamw state "))
      << lm.output;
  EXPECT_TRUE(contains(lm.output, "--shard full over 1 data-parallel rank shards nothing; running as --shard none"))
      << lm.output;
  EXPECT_FALSE(contains(lm.output, "ZeRO-")) << lm.output;

  auto image = runCommand("env -u RANK -u WORLD_SIZE " + dtrainBin() + " train --model mlp --dataset synthetic "
                          "--synthetic-samples 64 --synthetic-image-size 8 --batch-size 16 --progress none "
                          "--max-steps 2 2>&1",
                          300);
  ASSERT_EQ(image.exit_code, 0) << image.output;
  EXPECT_TRUE(contains(image.output, ", sgd lr 0.05 (momentum 0.9, weight decay 0.0005, warm-up 0.2 epochs, cosine "
                                     "to 0), sgd state "))
      << image.output;
}

// A model whose training state cannot fit the host's memory is refused
// before it is built (it used to run for minutes and be OOM-killed), with
// what it needs, what there is, and what would make it fit.
TEST(TrainLmTest, AModelTooBigForTheHostIsRefusedBeforeItIsBuilt) {
  std::ifstream meminfo("/proc/meminfo");
  long long available_kib = 0;
  for (std::string key; meminfo >> key;) {
    if (key == "MemAvailable:") {
      meminfo >> available_kib;
      break;
    }
  }
  // llama-8b's weights, gradients and AdamW state alone take 120 GiB.
  if (available_kib > 100LL << 20) GTEST_SKIP() << "this host could hold llama-8b's training state";
  const auto started = std::chrono::steady_clock::now();
  auto r = runCommand(train("--model llama-8b --dataset synthetic --max-steps 1 --progress none 2>&1"), 300);
  EXPECT_TRUE(testing::exitsTwoSaying(r, "the model does not fit on this host's memory, ")) << r.output;
  EXPECT_TRUE(contains(r.output, " available (MemAvailable ")) << r.output;
  EXPECT_TRUE(contains(r.output, "memory per rank (estimate): parameters ")) << r.output;
  EXPECT_TRUE(contains(r.output, "a smaller --batch-size or a smaller model")) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(60)) << r.output;
}

// On a terminal the bar moves after every step (at most four times a
// second), not only at each --log-every report: here no report comes before
// the end, and the bar still moves on its own.
TEST(TrainLmTest, TheProgressBarMovesBetweenReports) {
  auto r = runCommand(train("--model gpt2 --layers 2 --dim 32 --heads 4 --seq-len 32 --vocab-size 320 --dataset text "
                            "--tokenizer byte --batch-size 4 --max-steps 400 --log-every 100000 --progress bar 2>&1"),
                      300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t bars = 0;
  for (size_t at = r.output.find("\r["); at != std::string::npos; at = r.output.find("\r[", at + 1)) ++bars;
  EXPECT_GE(bars, 2u) << r.output;
  EXPECT_TRUE(contains(r.output, "/400 ")) << r.output;
}

class TrainLmBadInputTest : public ::testing::TestWithParam<BadCommandLine> {};

TEST_P(TrainLmBadInputTest, ExitsTwoWithAClearMessage) {
  const BadCommandLine& c = GetParam();
  auto r = runCommand(train("--progress none --max-steps 1 " + c.args), 120);
  EXPECT_TRUE(testing::exitsTwoSaying(r, c.expected));
}

std::string emptyShardDir() {
  const std::string dir = testing::makeTempDir("dtrain-lm-empty");
  // A shard whose header says 0 tokens: nothing to train on.
  std::ofstream out(dir + "/empty_train_000000.bin", std::ios::binary);
  int32_t header[256] = {20240520, 1, 0};
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  return dir;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TrainLmBadInputTest,
    ::testing::Values(
        BadCommandLine{"unknown_size", "--model gpt2-9b --dataset text", "gpt2-9b"},
        BadCommandLine{"heads_not_dividing_dim", "--model gpt2 --dim 64 --heads 5 --dataset synthetic", "--heads 5"},
        BadCommandLine{"kv_heads_not_dividing_heads", "--model llama --dim 64 --heads 4 --kv-heads 3 --dataset synthetic",
                 "--kv-heads 3"},
        BadCommandLine{"seq_len_above_positions", "--model gpt2 --seq-len 2048 --dataset synthetic", "--seq-len 2048"},
        BadCommandLine{"tokenizer_dir_missing_file", "--model gpt2 --dataset text --tokenizer gpt2 --tokenizer-dir /tmp",
                 "encoder.json"},
        BadCommandLine{"tokenizer_dir_of_nothing", "--model gpt2 --dataset text --tokenizer-dir /nonexistent-tokenizer",
                 "--tokenizer-dir without --tokenizer: tokenizer /nonexistent-tokenizer: no such file or directory"},
        BadCommandLine{"empty_corpus", "--model gpt2 --layers 2 --dim 64 --heads 4 --seq-len 64 --batch-size 4 "
                                     "--dataset text --data-dir " + emptyShardDir(),
                 "empty_train_000000.bin"},
        BadCommandLine{"image_data_for_a_language_model", "--model gpt2 --dataset fashion-mnist",
                 "--model gpt2 is a language model"},
        BadCommandLine{"text_for_an_image_model", "--model cnn --dataset text", "--dataset text is for language models"},
        BadCommandLine{"tokens_per_step_not_a_multiple",
                 "--model gpt2 --layers 2 --dim 64 --heads 4 --seq-len 64 --dataset synthetic --batch-size 4 "
                 "--tokens-per-step 1000",
                 "--tokens-per-step 1000 is not a multiple"},
        BadCommandLine{"lora_rank_zero", "--model llama --dataset synthetic --lora-rank 0", "--lora-rank '0': out of range; expected an integer from 1"},
        BadCommandLine{"lora_rank_negative", "--model llama --dataset synthetic --lora-rank -2", "--lora-rank '-2': out of range"},
        BadCommandLine{"lora_unknown_target", "--model llama --dataset synthetic --lora-rank 4 --lora-targets q,qkv",
                 "--lora-targets 'q,qkv': 'qkv' is not a target; expected a comma-separated list of q, k, v, o"},
        BadCommandLine{"lora_target_the_family_lacks",
                 "--model gpt2 --dataset synthetic --lora-rank 4 --lora-targets q,gate",
                 "--lora-targets q,gate: gpt2 has no 'gate' layer; its targets are q, k, v, o, up, down"},
        BadCommandLine{"lora_on_a_cnn", "--model cnn --dataset synthetic --lora-rank 4",
                 "--lora-rank 4: LoRA adapts the linear layers of language models (gpt2, llama); --model cnn is an "
                 "image model"},
        BadCommandLine{"lora_alpha_without_rank", "--model llama --dataset synthetic --lora-alpha 16",
                 "--lora-alpha and --lora-targets shape LoRA adapters; expected --lora-rank beside them"},
        BadCommandLine{"lora_with_tp", "--model llama --dataset synthetic --lora-rank 4 --tp 2",
                 "--lora-rank 4 with --tp 2: tensor and pipeline parallelism split the model's layers"},
        BadCommandLine{"lora_with_shard_full", "--model llama --dataset synthetic --lora-rank 4 --shard full",
                 "--lora-rank 4 with --shard full: ZeRO-3 shards trainable parameters only"}),
    testing::badCommandLineName);

}  // namespace
}  // namespace dtrain
