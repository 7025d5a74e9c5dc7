// `dtrain train --dataset chat` as a process: a tiny llama fine-tuned on a
// JSONL fixture (with LoRA; and imported from a Hugging Face directory with
// its own tokenizer), bad records refused by file and line or
// skipped under --max-bad-records, and a two-rank run resumed from a
// mid-epoch checkpoint ending with the bits of an uninterrupted one.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/bad_input.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"
#include "tests/train/train_runs.h"

namespace dtrain {
namespace {
using testing::contains;
using testing::dtrainBin;
using testing::runCommand;
using testing::TempDir;

// GPT-2's byte alphabet (tokenizer.json's spelling of byte b), as UTF-8.
std::string byteToken(int b) {
  const auto printable = [](int c) { return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174); };
  int code = b;
  if (!printable(b)) {
    code = 256;
    for (int c = 0; c < b; ++c) code += printable(c) ? 0 : 1;
  }
  std::string out;
  if (code < 0x80) {
    out.push_back(static_cast<char>(code));
  } else {
    out.push_back(static_cast<char>(0xC0 | (code >> 6)));
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  }
  return out;
}

// A byte-level tokenizer.json (no merges) with Llama 3's special tokens.
void writeByteChatTokenizer(const std::string& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byteToken(b)] = b;
  nlohmann::json added = nlohmann::json::array();
  int id = 256;
  for (const char* t : {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                        "<|eot_id|>"}) {
    added.push_back({{"id", id++}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  const nlohmann::json tokenizer = {
      {"version", "1.0"},         {"added_tokens", added}, {"normalizer", nullptr},
      {"pre_tokenizer", byte_level}, {"decoder", byte_level},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  testing::writeFile(dir + "/tokenizer.json", tokenizer.dump());
  testing::writeFile(dir + "/tokenizer_config.json",
                     nlohmann::json{{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}}.dump());
}

// 80 short conversations: "what is A plus B" answered with the sum, half
// as messages (with a system turn), half as prompt and completion.
std::string conversations() {
  std::string text;
  for (int i = 0; i < 80; ++i) {
    const int a = i % 9, b = (i * 7) % 10;
    const std::string q = std::to_string(a) + "+" + std::to_string(b) + "?", answer = std::to_string(a + b);
    nlohmann::json record;
    if (i % 2 == 0) {
      record["messages"] = {{{"role", "system"}, {"content", "add"}},
                            {{"role", "user"}, {"content", q}},
                            {{"role", "assistant"}, {"content", answer}}};
    } else {
      record = {{"prompt", q}, {"completion", answer}};
    }
    text += record.dump() + "\n";
  }
  return text;
}

struct ChatFixture {
  TempDir root{"dtrain-chat-run"};
  std::string data = root / "data", tokenizer = root / "tok";
  ChatFixture() {
    std::filesystem::create_directories(data);
    std::filesystem::create_directories(tokenizer);
    writeByteChatTokenizer(tokenizer);
    testing::writeFile(data + "/train.jsonl", conversations());
  }
  std::string args() const {
    return "--model llama --layers 2 --dim 32 --heads 4 --kv-heads 2 --ffn-dim 64 --seq-len 64 --dataset chat "
           "--data-dir " + data + " --tokenizer-dir " + tokenizer +
           " --batch-size 4 --seed 3 --lr 3e-3 --schedule constant --warmup-steps 0 --progress lines --log-every 2 ";
  }
};

std::string trainOne(const std::string& args) {
  return "env -u RANK -u WORLD_SIZE " + dtrainBin() + " train " + args + " 2>&1";
}

TEST(ChatRunsTest, ATinyLlamaFineTunesOnJsonlConversationsWithLora) {
  ChatFixture f;
  auto r = runCommand(trainOne(f.args() + "--lora-rank 4 --max-steps 8 --eval-steps 8 --eval-batches 2"), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "llama3 template")) << r.output;
  EXPECT_TRUE(contains(r.output, "with LoRA adapters")) << r.output;
  EXPECT_TRUE(contains(r.output, "validation")) << r.output;
  EXPECT_TRUE(contains(r.output, "conversations in")) << r.output;  // the packing's line
}

// A Hugging Face directory (exported here from a chat run, with the
// tokenizer beside it) fine-tuned with LoRA: --init-from's tokenizer and
// its chat template, no --tokenizer-dir.
TEST(ChatRunsTest, AnImportedModelFineTunesOnConversationsWithItsOwnTokenizer) {
  ChatFixture f;
  const std::string ckpt = f.root / "ckpt", hf = f.root / "hf";
  auto r = runCommand(trainOne(f.args() + "--max-steps 1 --checkpoint-dir " + ckpt), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = runCommand(dtrainBin() + " checkpoint export " + ckpt + " --format hf --out " + hf + " 2>&1", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  writeByteChatTokenizer(hf);
  r = runCommand(trainOne("--init-from " + hf + " --lora-rank 2 --seq-len 64 --dataset chat --data-dir " + f.data +
                          " --batch-size 4 --max-steps 2 --progress none"),
                 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "llama from " + hf)) << r.output;
  EXPECT_TRUE(contains(r.output, "(llama3 template)")) << r.output;
}

TEST(ChatRunsTest, BadRecordsAreNamedByFileAndLineAndStopTheRunOverTheLimit) {
  ChatFixture f;
  std::string bad = "{oops\n" R"({"messages": [{"role": "user", "content": "no answer"}]})" "\n" +
                    nlohmann::json{{"prompt", std::string(80, 'x')}, {"completion", "long"}}.dump() + "\n";
  testing::writeFile(f.data + "/bad.jsonl", bad);
  auto r = runCommand(trainOne(f.args() + "--max-steps 1"), 60);
  EXPECT_TRUE(testing::exitsTwoSaying(r, "3 bad record(s), more than --max-bad-records 0")) << r.output;
  EXPECT_TRUE(contains(r.output, f.data + "/bad.jsonl:1: invalid JSON")) << r.output;
  EXPECT_TRUE(contains(r.output, f.data + "/bad.jsonl:2: no assistant message")) << r.output;
  EXPECT_TRUE(contains(r.output, f.data + "/bad.jsonl:3: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "longer than --seq-len 64")) << r.output;
  r = runCommand(trainOne(f.args() + "--max-steps 1 --max-bad-records 3"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "skipping 3 bad record(s)")) << r.output;
  r = runCommand(trainOne(f.args() + "--max-steps 1 --chat-template chatml"), 60);
  EXPECT_TRUE(testing::exitsTwoSaying(r, "<|im_start|>")) << r.output;
}

// Two ranks, 6 steps: stopped after step 3 and resumed, the same bits.
TEST(ChatRunsTest, AResumedTwoRankRunEndsWithTheUninterruptedRunsBits) {
  ChatFixture f;
  TempDir whole("dtrain-chat-whole"), parts("dtrain-chat-parts");
  const std::string common = f.args() + "--checkpoint-every 3 --eval-steps 0 --eval-batches 1 ";
  auto a = runCommand(testing::launchTrain(2, common + "--max-steps 6 --checkpoint-dir " + whole.path()), 180);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = runCommand(testing::launchTrain(2, common + "--max-steps 3 --checkpoint-dir " + parts.path()), 180);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  auto c = runCommand(
      testing::launchTrain(2, common + "--max-steps 6 --resume auto --checkpoint-dir " + parts.path()), 180);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_TRUE(contains(c.output, "000000003")) << "should resume from step 3\n" << c.output;
  testing::expectSameState(testing::checkpointOf(whole, 6), testing::checkpointOf(parts, 6));
}

}  // namespace
}  // namespace dtrain
