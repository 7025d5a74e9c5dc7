// `dtrain generate` end to end, as real processes: a checkpoint that
// `dtrain train` wrote from byte-token shards, and checkpoints written here
// with dtrain::Checkpointer in the format of train/job_checkpoint.h (so the
// command is tested whatever the trainer does). The text starts with the
// prompt, a seed gives the same text, greedy decoding is the argmax
// continuation of the full forward (no KV cache) computed here (a LoRA
// run's checkpoint: of its merged export), and bad input exits 2 naming
// the input. A model trained on shards of `dtrain tokenize` (a
// Llama-3-style tokenizer.json) generates without --tokenizer.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "dtrain/checkpoint.h"
#include "models/language_model.h"
#include "models/lm_config.h"
#include "tests/data/hf_tokenizer_files.h"
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

constexpr int64_t kByteVocab = 257;  // the byte tokenizer's ids; 256 is end-of-text
constexpr int64_t kEndOfText = 256;

std::string quoted(const std::string& text) { return "'" + text + "'"; }

// `dtrain generate` with these arguments; stdout alone when `stdout_only`.
CommandResult generate(const std::string& args, bool stdout_only = false) {
  return runCommand(dtrainBin() + " generate " + args + (stdout_only ? " 2>/dev/null" : " 2>&1"), 120);
}

// A byte-token shard of a small repetitive text in `dir`, in llm.c's format
// (256 int32 header: magic, version 1, count; then uint16 tokens). Written
// here rather than with data::writeTokenShard: the tokenizer library brings
// libsentencepiece, whose protobuf-lite clashes with libtorch's protobuf in
// one process.
void writeByteShards(const std::string& dir) {
  const std::string text = "Hello world, hello dtrain. The quick brown fox jumps over the lazy dog. ";
  std::vector<uint16_t> tokens;
  for (int doc = 0; doc < 120; ++doc) {
    for (unsigned char c : text) tokens.push_back(c);
    tokens.push_back(kEndOfText);
  }
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream out(dir + "/bytes_train_000000.bin", std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size() * 4));
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

models::LanguageModelConfig tinyConfig(const std::string& family, int64_t kv_heads) {
  models::LanguageModelOverrides o;
  o.layers = 2;
  o.dim = 64;
  o.heads = 4;
  if (family == "llama") o.kv_heads = kv_heads;
  o.seq_len = 32;
  o.vocab_size = kByteVocab;
  return models::namedLanguageModel(family, o);
}

// A checkpoint as `dtrain train` writes one, of a freshly initialised model.
std::string writeCheckpoint(const std::string& dir, const models::LanguageModelConfig& config,
                            const nlohmann::json& tokenizer = nullptr, const std::string& skip_param = "") {
  torch::manual_seed(11);
  auto lm = models::createLanguageModel(config);
  CheckpointState state;
  for (const auto& item : lm->named_parameters()) {
    if (item.key() != skip_param) state.tensors["model.param." + item.key()] = item.value().detach();
  }
  state.meta = {{"step", 5}, {"model", config.name}, {"dataset", "text"}, {"model_config", nlohmann::json::object()}};
  for (const auto& [key, value] : models::languageModelMetadata(config)) state.meta["model_config"][key] = value;
  if (!tokenizer.is_null()) state.meta["tokenizer"] = tokenizer;
  return Checkpointer({.dir = dir, .keep = 3}).save(5, state);
}

// The greedy continuation by the full forward (no cache), byte tokens.
// Stops early before a near tie of the two best logits, where rounding may
// pick either; `exact` says whether it ran to the end.
struct Reference {
  std::string text;
  bool exact = true;
};

// `window` > 0: the model sees only the last `window` tokens (nanoGPT's crop).
Reference greedyReferenceOf(models::LanguageModel& lm, const std::string& prompt, int64_t new_tokens,
                            int64_t window = 0) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  Reference ref{prompt};
  for (int64_t i = 0; i < new_tokens; ++i) {
    const int64_t from = window > 0 ? std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - window) : 0;
    const std::vector<int64_t> seen(ids.begin() + from, ids.end());
    const torch::Tensor logits = lm.forward(torch::tensor(seen).view({1, -1}))[0][-1].narrow(0, 0, kByteVocab);
    const auto [top, index] = logits.topk(2);
    if ((top[0] - top[1]).item<double>() < 1e-4) return {ref.text, false};
    const int64_t next = index[0].item<int64_t>();
    if (next == kEndOfText) break;
    ref.text += static_cast<char>(next);
    ids.push_back(next);
  }
  return ref;
}

Reference greedyReference(const std::string& checkpoint, const std::string& prompt, int64_t new_tokens,
                          int64_t window = 0) {
  const CheckpointState state = loadCheckpoint(checkpoint);
  std::map<std::string, std::string> pairs;
  for (const auto& [key, value] : state.meta["model_config"].items()) pairs[key] = value.get<std::string>();
  auto lm = models::createLanguageModel(models::languageModelFromMetadata(pairs));
  torch::NoGradGuard no_grad;
  for (auto& item : lm->named_parameters()) item.value().copy_(state.tensors.at("model.param." + item.key()));
  return greedyReferenceOf(*lm, prompt, new_tokens, window);
}

void expectGreedyMatches(const std::string& checkpoint_dir, const std::string& file, const std::string& extra) {
  const CommandResult greedy =
      generate("--checkpoint " + checkpoint_dir + " --prompt Hello --max-new-tokens 20 --temperature 0 " + extra, true);
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  const Reference ref = greedyReference(file, "Hello", 20);
  if (ref.exact) {
    EXPECT_EQ(greedy.output, ref.text + "\n");
  } else {
    EXPECT_TRUE(greedy.output.starts_with(ref.text)) << greedy.output << " vs " << ref.text;
  }
}

// One checkpoint trained by `dtrain train` for the whole suite.
class GenerateCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("generate-cli");
    ::mkdir((*dir_ / "shards").c_str(), 0755);
    writeByteShards(*dir_ / "shards");
    const CommandResult trained = runCommand(
        dtrainBin() + " train --model gpt2 --layers 2 --dim 64 --heads 4 --seq-len 32 --vocab-size 257 "
                      "--dataset text --data-dir " + (*dir_ / "shards") + " --batch-size 8 "
                      "--optimizer adamw --lr 0.01 --warmup 0 --max-steps 20 --progress none --seed 3 --checkpoint-dir " +
                      (*dir_ / "ckpt") + " 2>&1",
        300);
    train_output_ = new std::string(std::to_string(trained.exit_code) + ": " + trained.output);
    trained_ok_ = trained.exit_code == 0;
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete train_output_;
  }
  void SetUp() override { ASSERT_TRUE(trained_ok_) << "dtrain train failed: " << *train_output_; }

  static std::string checkpointDir() { return *dir_ / "ckpt"; }
  static std::string newestCheckpoint() { return Checkpointer({.dir = checkpointDir()}).list().front(); }

  static inline TempDir* dir_ = nullptr;
  static inline std::string* train_output_ = nullptr;
  static inline bool trained_ok_ = false;
};

TEST_F(GenerateCliTest, ContinuesThePromptTheSameWayForASeed) {
  const std::string args = "--checkpoint " + checkpointDir() + " --prompt Hello --max-new-tokens 20 --seed 1 "
                           "--tokenizer byte";
  const CommandResult a = generate(args, true);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_TRUE(a.output.starts_with("Hello")) << a.output;
  EXPECT_LE(a.output.size(), 5 + 20 + 1u);
  EXPECT_EQ(generate(args, true).output, a.output);
  // The file itself, with its timing on stderr.
  const CommandResult b = generate("--checkpoint " + newestCheckpoint() + " --prompt Hello --max-new-tokens 20 "
                                   "--seed 1 --tokenizer byte");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(contains(b.output, a.output)) << b.output;
  EXPECT_TRUE(contains(b.output, "tokens/s")) << b.output;
}

// Greedy decoding, from the checkpoint and from its export as a Hugging
// Face directory (as transformers would load it; without tokenizer files
// there, the flags name the tokenizer).
TEST_F(GenerateCliTest, GreedyIsTheArgmaxContinuation) {
  expectGreedyMatches(checkpointDir(), newestCheckpoint(), "--tokenizer byte");
  // Top-1 sampling is greedy whatever the seed.
  const std::string args = "--checkpoint " + checkpointDir() + " --prompt Hello --max-new-tokens 20 --tokenizer byte ";
  EXPECT_EQ(generate(args + "--top-k 1 --seed 7", true).output, generate(args + "--temperature 0", true).output);

  const std::string hf = *dir_ / "hf";
  const CommandResult exported =
      runCommand(dtrainBin() + " checkpoint export " + checkpointDir() + " --format hf --out " + hf + " 2>&1", 120);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  expectGreedyMatches(hf, newestCheckpoint(), "--tokenizer byte");
  const CommandResult bare = generate("--checkpoint " + hf + " --prompt Hello --max-new-tokens 2");
  EXPECT_EQ(bare.exit_code, 2) << bare.output;
  EXPECT_TRUE(contains(bare.output, "names no tokenizer")) << bare.output;
}

TEST_F(GenerateCliTest, ShardCheckpointNeedsATokenizerFlag) {
  const CommandResult r = generate("--checkpoint " + checkpointDir() + " --prompt Hello");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "names no tokenizer")) << r.output;
  EXPECT_TRUE(contains(r.output, "--tokenizer")) << r.output;
}

// GPT-2's learned positions past the trained --seq-len (32 here) were never
// trained: the model sees the last 32 tokens, a window that slides as the
// text grows (nanoGPT's crop), for a prompt and a completion of any length.
TEST_F(GenerateCliTest, LearnedPositionsSeeAWindowOfTheTrainedLength) {
  const std::string prompt = "Hello,the-quick-brown-fox-jumps-over-the";  // 40 tokens, more than the window
  const CommandResult greedy = generate("--checkpoint " + checkpointDir() + " --prompt " + prompt +
                                            " --max-new-tokens 30 --temperature 0 --tokenizer byte",
                                        true);
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  const Reference ref = greedyReference(newestCheckpoint(), prompt, 30, /*window=*/32);
  if (ref.exact) {
    EXPECT_EQ(greedy.output, ref.text + "\n");
  } else {
    EXPECT_TRUE(greedy.output.starts_with(ref.text)) << greedy.output << " vs " << ref.text;
  }
  const CommandResult said = generate("--checkpoint " + checkpointDir() + " --prompt Hello --max-new-tokens 2000 "
                                      "--tokenizer byte --seed 2");
  ASSERT_EQ(said.exit_code, 0) << said.output;
  EXPECT_TRUE(contains(said.output, "trained on 32 of its 1024 positions; it sees the last 32 tokens")) << said.output;
}

// `dtrain tokenize` names its tokenizer beside the shards, `dtrain train` on
// them names it in its checkpoints, and `dtrain generate` needs no flag: a
// Llama-3-style tokenizer.json here, whose prompts begin with <|begin_of_text|>.
TEST(GenerateFromTokenizedShards, FindsTheTokenizerWithoutFlags) {
  TempDir dir("generate-tokenized");
  ASSERT_EQ(::mkdir((dir / "llama").c_str(), 0755), 0);
  testing::writeTinyLlama(dir / "llama");
  std::string text;
  for (int i = 0; i < 40; ++i) text += "Hello world, hello dtrain " + std::to_string(i * 7) + ". The quick fox.\n%\n";
  testing::writeFile(dir / "corpus.txt", text);
  CommandResult r = runCommand(dtrainBin() + " tokenize " + (dir / "corpus.txt") + " --doc-separator % " +
                               "--tokenizer-dir " + (dir / "llama") + " --out " + (dir / "shards") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = runCommand(dtrainBin() + " train --model llama --layers 1 --dim 32 --heads 2 --kv-heads 2 --seq-len 16 "
                 "--vocab-size 320 --dataset text --data-dir " + (dir / "shards") + " --batch-size 4 --max-steps 2 "
                 "--progress none --checkpoint-dir " + (dir / "ckpt") + " 2>&1",
                 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = generate("--checkpoint " + (dir / "ckpt") + " --prompt Hello --max-new-tokens 4 --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "tokenizer hf")) << r.output;
  EXPECT_TRUE(contains(r.output, "prompt of 6 tokens")) << r.output;  // <|begin_of_text|> H e l l o
  EXPECT_TRUE(contains(r.output, "\nHello")) << r.output;               // the prompt, without <|begin_of_text|>
}

// A LoRA run's checkpoint (its adapters, over the fresh weights of its
// seed): generate merges them into the base as it loads, so greedy decoding
// is the argmax continuation of the merged export.
TEST_F(GenerateCliTest, LoraCheckpointGeneratesWithItsAdaptersMerged) {
  const std::string lora = *dir_ / "lora";
  const CommandResult trained = runCommand(
      dtrainBin() + " train --model gpt2 --layers 2 --dim 64 --heads 4 --seq-len 32 --vocab-size 257 --dataset text "
                    "--data-dir " + (*dir_ / "shards") + " --tokenizer byte --batch-size 8 --lr 0.05 --warmup-steps 0 "
                    "--max-steps 10 --progress none --seed 4 --lora-rank 4 --lora-targets q,v,o,up,down "
                    "--checkpoint-dir " + lora + " 2>&1",
      300);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const CommandResult merged = runCommand(dtrainBin() + " checkpoint export " + lora + " --merge-lora --out " +
                                              (*dir_ / "lora.safetensors") + " 2>&1",
                                          120);
  ASSERT_EQ(merged.exit_code, 0) << merged.output;
  auto lm = models::createLanguageModel(tinyConfig("gpt2", 4));
  models::loadModuleSafetensors(*lm, *dir_ / "lora.safetensors");
  const CommandResult greedy =
      generate("--checkpoint " + lora + " --prompt Hello --max-new-tokens 20 --temperature 0 --tokenizer byte", true);
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  const Reference ref = greedyReferenceOf(*lm, "Hello", 20);
  if (ref.exact) {
    EXPECT_EQ(greedy.output, ref.text + "\n");
  } else {
    EXPECT_TRUE(greedy.output.starts_with(ref.text)) << greedy.output << " vs " << ref.text;
  }
}

TEST(GenerateCliBadInput, ExitsTwoNamingTheInput) {
  TempDir dir("generate-bad");
  const std::string ckpt = writeCheckpoint(dir / "lm", tinyConfig("gpt2", 4), {{"kind", "byte"}, {"path", ""}});
  const std::string ok = "--checkpoint " + ckpt + " --prompt Hello ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--prompt Hello", "--checkpoint is required"},
      {"--checkpoint " + (dir / "missing") + " --prompt Hello", "--checkpoint " + (dir / "missing")},
      {ok + "--top-k -1", "--top-k"},
      {ok + "--temperature nan", "--temperature"},
      {ok + "--max-new-tokens 0", "--max-new-tokens"},
      {ok + "--tokenizer words", "--tokenizer"},
      {ok + "--tokenizer gpt2 --tokenizer-dir " + dir.path(), "--tokenizer gpt2"},
  };
  for (const auto& [args, expected] : cases) {
    const CommandResult r = generate(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, expected)) << args << "\n" << r.output;
  }
}

TEST(GenerateCliBadInput, CheckpointsThatCannotGenerate) {
  TempDir dir("generate-bad-ckpt");
  ::mkdir((dir / "empty").c_str(), 0755);
  CheckpointState image;
  image.tensors["model.param.fc.weight"] = torch::zeros({2, 2});
  image.meta = {{"step", 1}, {"model", "cnn"}, {"dataset", "fashion-mnist"}};
  const std::string image_file = Checkpointer({.dir = dir / "image"}).save(1, image);
  const std::string partial = writeCheckpoint(dir / "partial", tinyConfig("gpt2", 4), nullptr, "transformer.ln_f.bias");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dir / "empty", "no valid checkpoint"},
      {image_file, "(model 'cnn') holds no language-model config"},
      {partial, "has no 'model.param.transformer.ln_f.bias'"},
  };
  for (const auto& [checkpoint, expected] : cases) {
    const CommandResult r = generate("--checkpoint " + checkpoint + " --prompt Hello --tokenizer byte");
    EXPECT_EQ(r.exit_code, 2) << checkpoint << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, expected)) << checkpoint << "\n" << r.output;
  }
  if (!torch::cuda::is_available()) {
    const CommandResult r = generate("--checkpoint " + partial + " --prompt Hello --tokenizer byte --device cuda");
    EXPECT_EQ(r.exit_code, 2) << r.output;
  }
}

// A llama (grouped-query attention) whose checkpoint names its tokenizer:
// no flag needed, greedy is the argmax continuation, an empty prompt works.
TEST(GenerateCliWrittenCheckpoint, LlamaWithTheCheckpointsTokenizer) {
  TempDir dir("generate-llama");
  const std::string ckpt = writeCheckpoint(dir / "ckpt", tinyConfig("llama", 2), {{"kind", "byte"}, {"path", ""}});
  expectGreedyMatches(dir / "ckpt", ckpt, "");
  const CommandResult empty = generate("--checkpoint " + ckpt + " --prompt " + quoted("") + " --max-new-tokens 5");
  EXPECT_EQ(empty.exit_code, 0) << empty.output;
  const CommandResult bf16 = generate("--checkpoint " + ckpt + " --prompt Hi --max-new-tokens 5 --precision bf16");
  EXPECT_EQ(bf16.exit_code, 0) << bf16.output;
  EXPECT_TRUE(contains(bf16.output, "bf16")) << bf16.output;
  // Rotary positions: past the trained 32 it runs and says so; past the model's 8192 it is refused.
  const CommandResult past = generate("--checkpoint " + ckpt + " --prompt Hello --max-new-tokens 40");
  EXPECT_EQ(past.exit_code, 0) << past.output;
  EXPECT_TRUE(contains(past.output, "pass the 32 positions the model was trained on (--seq-len)")) << past.output;
  const CommandResult too_many = generate("--checkpoint " + ckpt + " --prompt Hello --max-new-tokens 8190");
  EXPECT_EQ(too_many.exit_code, 2) << too_many.output;
  EXPECT_TRUE(contains(too_many.output, "--max-new-tokens 8190")) << too_many.output;
  EXPECT_TRUE(contains(too_many.output, "at most 8187")) << too_many.output;
}

}  // namespace
}  // namespace dtrain
