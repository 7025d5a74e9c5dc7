// Instruction data without libtorch: the chat templates' text against the
// strings Hugging Face's Llama 3 and ChatML templates render, which tokens
// the loss trains on, the records a run refuses (by file and line), the
// validation split and the packing of samples into rows.
#include <gtest/gtest.h>

#include <set>

#include "common/error.h"
#include "data/chat_records.h"
#include "data/chat_samples.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "tests/data/hf_tokenizer_files.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::data {
namespace {

using testing::TempDir;

const std::vector<ChatMessage> kThreeTurns = {{ChatRole::kSystem, "You are terse."},
                                              {ChatRole::kUser, "Hi!"},
                                              {ChatRole::kAssistant, "Hello."}};

// The tiny Llama-3-style tokenizer with both templates' special tokens
// (ids 265..269) and, when `chat_template` is given, a tokenizer_config.json
// that carries it.
void writeChatTokenizer(const std::string& dir, const std::string& chat_template = "") {
  nlohmann::json json = testing::tinyLlamaTokenizer();
  uint32_t id = 265;
  for (const char* token : {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>"}) {
    json["added_tokens"].push_back({{"id", id++}, {"content", token}, {"single_word", false}, {"lstrip", false},
                                    {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  testing::writeJson(dir + "/tokenizer.json", json);
  nlohmann::json config = {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|end_of_text|>"}};
  if (!chat_template.empty()) config["chat_template"] = chat_template;
  testing::writeJson(dir + "/tokenizer_config.json", config);
}

TEST(ChatTemplateTest, Llama3RendersAsHuggingFacesTemplate) {
  // apply_chat_template(messages, tokenize=False) of Meta-Llama-3-8B-Instruct.
  EXPECT_EQ(chatText(renderChat(ChatTemplate::kLlama3, kThreeTurns)),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>");
  // The template trims each content.
  EXPECT_EQ(chatText(renderChat(ChatTemplate::kLlama3, {{ChatRole::kAssistant, "  Hi \n"}})),
            "<|begin_of_text|><|start_header_id|>assistant<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplateTest, ChatmlRendersAsHuggingFacesTemplate) {
  EXPECT_EQ(chatText(renderChat(ChatTemplate::kChatml, kThreeTurns)),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n");
}

TEST(ChatTemplateTest, OnlyTheAssistantsContentAndEndOfTurnAreTrained) {
  const std::vector<ChatMessage> two_answers = {{ChatRole::kUser, "a"}, {ChatRole::kAssistant, "b"},
                                                {ChatRole::kUser, "c"}, {ChatRole::kAssistant, "d"}};
  std::string trained_llama, trained_chatml;
  for (const ChatPiece& p : renderChat(ChatTemplate::kLlama3, two_answers)) trained_llama += p.trained ? p.text : "";
  for (const ChatPiece& p : renderChat(ChatTemplate::kChatml, two_answers)) trained_chatml += p.trained ? p.text : "";
  EXPECT_EQ(trained_llama, "b<|eot_id|>d<|eot_id|>");
  EXPECT_EQ(trained_chatml, "b<|im_end|>d<|im_end|>");
}

TEST(ChatTemplateTest, MaskingPutsTheLossOnExactlyTheAssistantTokens) {
  TempDir dir("dtrain-chat-tok");
  writeChatTokenizer(dir.path());
  const auto tokenizer = makeTokenizer("hf", dir.path());
  for (ChatTemplate format : {ChatTemplate::kLlama3, ChatTemplate::kChatml}) {
    const ChatSample sample = tokenizeChat(*tokenizer, format, kThreeTurns);
    ASSERT_EQ(sample.tokens.size(), sample.trained.size());
    EXPECT_EQ(tokenizer->decode(sample.tokens), chatText(renderChat(format, kThreeTurns)));
    std::vector<uint32_t> trained;
    for (size_t i = 0; i < sample.tokens.size(); ++i) {
      if (sample.trained[i]) trained.push_back(sample.tokens[i]);
    }
    const std::string end = format == ChatTemplate::kLlama3 ? "<|eot_id|>" : "<|im_end|>";
    EXPECT_EQ(tokenizer->decode(trained), "Hello." + end) << chatTemplateName(format);
    EXPECT_EQ(trained.back(), tokenizer->encode(end).at(0));
    // In a row, the targets are the trained tokens and nothing else.
    ChatPacking packing = packChatSamples({sample}, 64, 0);
    std::vector<int64_t> in(64), target(64), position(64);
    packing.writeRow(0, in.data(), target.data(), position.data());
    std::vector<uint32_t> targeted;
    for (int64_t t : target) {
      if (t != kIgnoreTarget) targeted.push_back(static_cast<uint32_t>(t));
    }
    EXPECT_EQ(targeted, trained);
    EXPECT_EQ(target[sample.tokens.size() - 1], kIgnoreTarget);  // the sample's last token predicts nothing
  }
}

TEST(ChatTemplateTest, AutoTakesTheConfigsTemplateElseTheTokenizersTokensElseRefuses) {
  TempDir dir("dtrain-chat-auto");
  writeChatTokenizer(dir.path(), "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                                 "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}");
  auto tokenizer = makeTokenizer("hf", dir.path());
  EXPECT_EQ(resolveChatTemplate(ChatTemplate::kAuto, dir.path(), *tokenizer), ChatTemplate::kChatml);
  writeChatTokenizer(dir.path());  // no chat_template: it has Llama 3's tokens, checked first
  tokenizer = makeTokenizer("hf", dir.path());
  EXPECT_EQ(resolveChatTemplate(ChatTemplate::kAuto, dir.path(), *tokenizer), ChatTemplate::kLlama3);
  EXPECT_EQ(resolveChatTemplate(ChatTemplate::kChatml, dir.path(), *tokenizer), ChatTemplate::kChatml);
  const auto bytes = makeTokenizer("byte", "");
  const std::string auto_error = testing::configErrorOf([&] { resolveChatTemplate(ChatTemplate::kAuto, "", *bytes); });
  EXPECT_TRUE(testing::contains(auto_error, "--chat-template")) << auto_error;
  const std::string lacks = testing::configErrorOf([&] { resolveChatTemplate(ChatTemplate::kChatml, "", *bytes); });
  EXPECT_TRUE(testing::contains(lacks, "<|im_start|>")) << lacks;
}

TEST(ChatRecordsTest, EachBadRecordIsNamedByFileAndLine) {
  TempDir dir("dtrain-chat-records");
  testing::writeFile(dir / "a.jsonl",
                     R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})"
                     "\n{not json\n"
                     "\n"  // blank: skipped, still counted as a line
                     R"({"messages": []})"
                     "\n"
                     R"({"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "a"}]})"
                     "\n"
                     R"({"messages": [{"content": "x"}, {"role": "assistant", "content": "a"}]})"
                     "\n"
                     R"({"messages": [{"role": "user", "content": "only a question"}]})"
                     "\n"
                     R"({"prompt": "2+2?", "completion": "4"})"
                     "\n"
                     R"({"text": "plain"})"
                     "\n");
  const ChatRecords r = readChatRecords(chatDataFiles(dir.path(), "--data-dir"));
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[1].line, 8);
  EXPECT_EQ(r.records[1].messages.at(0).role, ChatRole::kUser);
  EXPECT_EQ(r.records[1].messages.at(1).content, "4");
  const std::vector<std::pair<int64_t, std::string>> expected = {
      {2, "invalid JSON"},       {4, "no messages"}, {5, "unknown role 'tool'"},
      {6, "no \"role\""},        {7, "no assistant message"}, {9, "no \"messages\""}};
  ASSERT_EQ(r.bad.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(r.bad[i].where(), dir / "a.jsonl" + ":" + std::to_string(expected[i].first));
    EXPECT_TRUE(testing::contains(r.bad[i].reason, expected[i].second)) << r.bad[i].reason;
  }
  const std::string none = testing::configErrorOf([&] { chatDataFiles(dir / "missing", "--data-dir"); });
  EXPECT_TRUE(testing::contains(none, "--data-dir")) << none;
}

TEST(ChatRecordsTest, TheValidationSplitIsAPureFunctionOfEachRecord) {
  int held = 0;
  for (int i = 0; i < 2000; ++i) {
    ChatRecord r;
    r.hash = recordHash("record " + std::to_string(i));
    const bool out = heldOut(r, 0.05);
    EXPECT_EQ(out, heldOut(r, 0.05));
    if (out) {
      EXPECT_TRUE(heldOut(r, 0.2));  // a larger share holds out a superset
    }
    held += out ? 1 : 0;
  }
  EXPECT_GT(held, 60);
  EXPECT_LT(held, 140);
}

TEST(ChatPackingTest, BestFitDecreasingFillsRowsAndRestartsPositions) {
  std::vector<ChatSample> samples;
  for (int n : {5, 3, 6, 2, 4}) {
    ChatSample s;
    for (int i = 0; i < n; ++i) s.tokens.push_back(static_cast<uint32_t>(10 * n + i));
    s.trained.assign(static_cast<size_t>(n), 1);
    samples.push_back(s);
  }
  const ChatPacking p = packChatSamples(samples, 8, 1);
  // 6 -> row 0 (2 left), 5 -> row 1 (3 left), 4 -> row 2, 3 -> row 1 (full), 2 -> row 0 (full).
  ASSERT_EQ(p.rowCount(), 3);
  EXPECT_EQ(p.rows[0], (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(p.rows[1], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(p.rows[2], (std::vector<int32_t>{4}));
  std::vector<int64_t> in(8), target(8), position(8);
  p.writeRow(2, in.data(), target.data(), position.data());
  EXPECT_EQ(in, (std::vector<int64_t>{40, 41, 42, 43, 1, 1, 1, 1}));
  EXPECT_EQ(target, (std::vector<int64_t>{41, 42, 43, -100, -100, -100, -100, -100}));
  EXPECT_EQ(position, (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  p.writeRow(0, in.data(), target.data(), position.data());
  EXPECT_EQ(position, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 0, 1}));
  EXPECT_FALSE(p.singleDocument(0));
  EXPECT_THROW(packChatSamples(samples, 5, 0), ConfigError);
}

}  // namespace
}  // namespace dtrain::data
