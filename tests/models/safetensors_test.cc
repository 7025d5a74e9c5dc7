// safetensors: round trips, the byte layout, and files that break the rules.
#include "models/safetensors.h"

#include "common/error.h"
#include "models/language_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::models {
namespace {

using testing::configErrorOf;
using testing::contains;
using testing::TempDir;

// A file (a new one each call) of a hand-written header and `data_bytes`
// zero bytes of data.
std::string handMade(const TempDir& dir, const std::string& header, size_t data_bytes,
                     uint64_t header_length_field = UINT64_MAX) {
  static int files = 0;
  const uint64_t length = header_length_field == UINT64_MAX ? header.size() : header_length_field;
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &length, 8);
  bytes += header + std::string(data_bytes, '\0');
  const std::string path = dir / ("hand" + std::to_string(++files) + ".safetensors");
  testing::writeFile(path, bytes);
  return path;
}

TEST(SafetensorsTest, RoundTripsEveryDtype) {
  TempDir dir("safetensors");
  torch::manual_seed(0);
  const NamedTensors tensors = {
      {"f32", torch::randn({2, 3})},
      {"bf16", torch::randn({4}).to(torch::kBFloat16)},
      {"f16", torch::randn({3, 1}).to(torch::kHalf)},
      {"f64", torch::randn({2}, torch::kDouble)},
      {"i64", torch::arange(-3, 3)},
      {"i32", torch::arange(5, torch::kInt)},
      {"u8", torch::arange(7, torch::kByte)},
      {"bool", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(2.5f)},
      {"empty", torch::zeros({0, 4})},
      {"strided", torch::randn({3, 4}).t()},
  };
  writeSafetensors(dir / "all.safetensors", tensors, {{"format", "pt"}, {"note", "x"}});
  // Read, and memory-mapped (its views outlive the contents they came in).
  torch::Tensor mapped_f32;
  for (const SafetensorsContents& back : {readSafetensors(dir / "all.safetensors"), mapSafetensors(dir / "all.safetensors")}) {
    ASSERT_EQ(back.tensors.size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      EXPECT_EQ(back.tensors[i].first, tensors[i].first);
      EXPECT_EQ(back.tensors[i].second.scalar_type(), tensors[i].second.scalar_type()) << tensors[i].first;
      EXPECT_TRUE(torch::equal(back.tensors[i].second, tensors[i].second)) << tensors[i].first;
    }
    EXPECT_EQ(back.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"note", "x"}}));
    mapped_f32 = back.tensors[0].second;
  }
  EXPECT_TRUE(torch::equal(mapped_f32, tensors[0].second));
}

TEST(SafetensorsTest, ByteLayoutIsTheFormats) {
  TempDir dir("safetensors");
  writeSafetensors(dir / "x.safetensors", {{"a", torch::tensor({1.0f, 2.0f})}, {"b", torch::tensor({int64_t{7}})}});
  const std::string bytes = testing::readFile(dir / "x.safetensors");
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  EXPECT_EQ(length % 8, 0u);  // padded so the data start 8-byte aligned
  ASSERT_EQ(bytes.size(), 8 + length + 16);
  const auto header = nlohmann::json::parse(bytes.substr(8, length));
  EXPECT_EQ(header["a"]["dtype"], "F32");
  EXPECT_EQ(header["a"]["shape"], nlohmann::json::array({2}));
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(header["b"]["dtype"], "I64");
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json::array({8, 16}));
  EXPECT_FALSE(header.contains("__metadata__"));
  float second = 0;
  std::memcpy(&second, bytes.data() + 8 + length + 4, 4);
  EXPECT_EQ(second, 2.0f);
}

TEST(SafetensorsTest, MalformedFilesNameTheFileAndTheRule) {
  TempDir dir("safetensors");
  const std::string f32 = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  struct Case {
    std::string path;
    std::string expected;
  };
  const std::string short_path = dir / "short.safetensors";
  testing::writeFile(short_path, "abc");
  const Case cases[] = {
      {short_path, "has 3 bytes, fewer than its 8-byte header length"},
      {handMade(dir, f32, 8, 1000), "header length 1000 exceeds the"},
      {handMade(dir, "{not json", 0), "header is not valid JSON"},
      {handMade(dir, R"({"t":{"dtype":"Q8","shape":[2],"data_offsets":[0,2]}})", 2), "unknown dtype \"Q8\""},
      {handMade(dir, f32, 4), "data_offsets [0,8] lie outside the 4 data bytes"},
      {handMade(dir, R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       "holds 8 bytes but dtype \"F32\" x shape [3] needs 12"},
      {handMade(dir, R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
       "starts at byte 4 of the data, expected 0"},
      {handMade(dir, R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8), "tensors cover 4 of its 8"},
      {handMade(dir, R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "is not a list of sizes"},
      {handMade(dir, R"({"__metadata__":{"k":3}})", 0), "__metadata__ 'k' is not a string"},
  };
  for (const Case& c : cases) {
    const std::string msg = configErrorOf([&] { readSafetensors(c.path); });
    EXPECT_TRUE(contains(msg, c.expected)) << msg;
    const std::string mapped = configErrorOf([&] { mapSafetensors(c.path); });
    EXPECT_TRUE(contains(mapped, c.expected)) << mapped;
    EXPECT_TRUE(contains(msg, c.path)) << msg;
  }
  const std::string missing = dir / "missing.safetensors";
  const std::string msg = testing::errorOf<IoError>([&] { readSafetensors(missing); });
  EXPECT_TRUE(contains(msg, "cannot open safetensors file " + missing)) << msg;
}

TEST(SafetensorsTest, ModuleWeightsRoundTripStrictly) {
  TempDir dir("safetensors");
  LanguageModelOverrides o;
  o.layers = 1;
  o.dim = 16;
  o.heads = 2;
  o.vocab_size = 30;
  const LanguageModelConfig c = namedLanguageModel("gpt2", o);
  torch::manual_seed(1);
  auto a = createLanguageModel(c);
  saveModuleSafetensors(*a, dir / "a.safetensors", languageModelMetadata(c));
  torch::manual_seed(2);
  auto b = createLanguageModel(c);
  const auto metadata = loadModuleSafetensors(*b, dir / "a.safetensors");
  EXPECT_EQ(languageModelFromMetadata(metadata).vocab_size, 30);
  const torch::Tensor x = torch::randint(30, {1, 5});
  EXPECT_TRUE(torch::equal(a->forward(x), b->forward(x)));

  o.dim = 32;
  auto wider = createLanguageModel(namedLanguageModel("gpt2", o));
  const std::string msg = configErrorOf([&] { loadModuleSafetensors(*wider, dir / "a.safetensors"); });
  EXPECT_TRUE(contains(msg, dir / "a.safetensors")) << msg;
  EXPECT_TRUE(contains(msg, "tensor 'transformer.wte.weight' has shape [30, 16], the model's has [30, 32]")) << msg;
  o.dim = 16;
  o.tie_embeddings = false;
  auto untied = createLanguageModel(namedLanguageModel("gpt2", o));
  EXPECT_TRUE(contains(configErrorOf([&] { loadModuleSafetensors(*untied, dir / "a.safetensors"); }),
                       "lacks the model's tensor 'lm_head.weight'"));
  saveModuleSafetensors(*untied, dir / "untied.safetensors");
  EXPECT_TRUE(contains(configErrorOf([&] { loadModuleSafetensors(*a, dir / "untied.safetensors"); }),
                       "holds tensor 'lm_head.weight', which the model does not have"));
}

}  // namespace
}  // namespace dtrain::models
