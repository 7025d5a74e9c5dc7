// Token shards in llm.c's format: written, read back, and broken on purpose
// to check that each bad input is refused with a message naming the file
// and what was expected. Shard sets: directory and glob discovery, order,
// reads across shard boundaries. Synthetic tokens: a pure function of seed.
#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "data/token_shard.h"
#include "data/token_shard_set.h"
#include "data/token_source.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::data {
namespace {

using ::testing::HasSubstr;
using testing::errorOf;

int64_t fileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

std::vector<std::string> namesIn(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  while (const dirent* e = d ? ::readdir(d) : nullptr) {
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
  }
  if (d) ::closedir(d);
  return names;
}

class TokenShardTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_ / name; }
  const std::string& dir() const { return dir_.path(); }

  // A shard written byte by byte: header ints, then raw token bytes.
  std::string writeRaw(const std::string& name, std::vector<int32_t> header, const std::vector<char>& body) {
    header.resize(256, 0);
    std::ofstream out(path(name), std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out.write(body.data(), static_cast<std::streamsize>(body.size()));
    return path(name);
  }

  std::vector<int32_t> headerOf(const std::string& p) const {
    std::vector<int32_t> header(256);
    std::ifstream in(p, std::ios::binary);
    in.read(reinterpret_cast<char*>(header.data()), 1024);
    return header;
  }

  testing::TempDir dir_{"dtrain-token-shard"};
};

std::vector<uint32_t> readAll(const TokenShard& shard) {
  std::vector<uint32_t> out;
  for (int64_t i = 0; i < shard.size(); ++i) out.push_back(shard.token(i));
  return out;
}

TEST_F(TokenShardTest, RoundTripVersion1WithUint16Tokens) {
  const std::vector<uint32_t> tokens = {0, 1, 50256, 65535 % 50257, 7, 42};
  const std::string p = path("gpt2_train_000001.bin");
  writeTokenShard(p, tokens, 50257);
  EXPECT_EQ(fileSize(p), static_cast<int64_t>(1024 + 2 * tokens.size()));
  const std::vector<int32_t> header = headerOf(p);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], static_cast<int32_t>(tokens.size()));
  for (int i = 3; i < 256; ++i) EXPECT_EQ(header[i], 0) << "header int " << i;

  TokenShard shard(p, 50257);
  EXPECT_EQ(shard.version(), 1);
  EXPECT_EQ(shard.size(), static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(readAll(shard), tokens);
  std::vector<int64_t> middle(3);
  shard.copyTokens(2, 3, middle.data());
  EXPECT_EQ(middle, (std::vector<int64_t>{50256, 65535 % 50257, 7}));
  EXPECT_THROW(shard.copyTokens(4, 3, middle.data()), std::out_of_range);
  // Nothing but the shard is left behind (no temp file).
  EXPECT_EQ(namesIn(dir()), std::vector<std::string>{"gpt2_train_000001.bin"});
}

TEST_F(TokenShardTest, RoundTripVersion2WithUint32TokensForLargeVocabularies) {
  const std::vector<uint32_t> tokens = {0, 65535, 65536, 70000, 128255};
  const std::string p = path("llama_train_000001.bin");
  writeTokenShard(p, tokens, 128256);
  EXPECT_EQ(fileSize(p), static_cast<int64_t>(1024 + 4 * tokens.size()));
  const std::vector<int32_t> header = headerOf(p);
  EXPECT_EQ(header[0], kTokenShardMagic);
  EXPECT_EQ(header[1], 2);
  EXPECT_EQ(header[2], 5);
  TokenShard shard(p, 128256);
  EXPECT_EQ(shard.version(), 2);
  EXPECT_EQ(readAll(shard), tokens);
}

TEST_F(TokenShardTest, VocabularyOf65536StillFitsVersion1AndEmptyShardsRoundTrip) {
  writeTokenShard(path("a.bin"), {65535, 0}, 65536);
  EXPECT_EQ(TokenShard(path("a.bin")).version(), 1);
  writeTokenShard(path("empty.bin"), {}, 100);
  TokenShard empty(path("empty.bin"), 100);
  EXPECT_EQ(empty.size(), 0);
}

TEST_F(TokenShardTest, RewritingAShardReplacesIt) {
  writeTokenShard(path("a.bin"), {1, 2, 3}, 10);
  writeTokenShard(path("a.bin"), {4}, 10);
  EXPECT_EQ(readAll(TokenShard(path("a.bin"))), std::vector<uint32_t>{4});
}

TEST_F(TokenShardTest, WriterRefusesATokenOutsideTheVocabularyAndWritesNothing) {
  const std::string p = path("bad.bin");
  const std::string msg = errorOf<ConfigError>([&] { writeTokenShard(p, {1, 2, 3, 1000, 5}, 1000); });
  EXPECT_THAT(msg, HasSubstr(p));
  EXPECT_THAT(msg, HasSubstr("token 1000 at token offset 3"));
  EXPECT_THAT(msg, HasSubstr("[0, 1000)"));
  EXPECT_FALSE(testing::pathExists(p));
  EXPECT_TRUE(namesIn(dir()).empty());
  EXPECT_THAT(errorOf<ConfigError>([&] { writeTokenShard(p, {1}, 0); }), HasSubstr("vocabulary size 0"));
}

TEST_F(TokenShardTest, WriterIoErrorNamesThePath) {
  const std::string p = path("no/such/dir/x.bin");
  const std::string msg = errorOf<IoError>([&] { writeTokenShard(p, {1}, 10); });
  EXPECT_THAT(msg, HasSubstr(p));
  EXPECT_THAT(msg, HasSubstr("No such file or directory"));
}

TEST_F(TokenShardTest, BadMagicIsRefused) {
  const std::string p = writeRaw("m.bin", {12345, 1, 0}, {});
  const std::string msg = errorOf<ConfigError>([&] { TokenShard s(p); });
  EXPECT_THAT(msg, HasSubstr(p));
  EXPECT_THAT(msg, HasSubstr("magic number 12345"));
  EXPECT_THAT(msg, HasSubstr("expected 20240520"));
}

TEST_F(TokenShardTest, UnknownVersionIsRefused) {
  const std::string p = writeRaw("v.bin", {kTokenShardMagic, 3, 0}, {});
  const std::string msg = errorOf<ConfigError>([&] { TokenShard s(p); });
  EXPECT_THAT(msg, HasSubstr(p));
  EXPECT_THAT(msg, HasSubstr("unknown version 3"));
  EXPECT_THAT(msg, HasSubstr("expected 1 (uint16 tokens) or 2 (uint32 tokens)"));
}

TEST_F(TokenShardTest, TruncatedBodyIsRefused) {
  const std::string p = writeRaw("t.bin", {kTokenShardMagic, 1, 10}, std::vector<char>(10));
  const std::string msg = errorOf<ConfigError>([&] { TokenShard s(p); });
  EXPECT_THAT(msg, HasSubstr(p));
  EXPECT_THAT(msg, HasSubstr("truncated: it has 1034 bytes"));
  EXPECT_THAT(msg, HasSubstr("10 tokens of 2 bytes, so expected exactly 1044 bytes"));
}

TEST_F(TokenShardTest, TrailingBytesAreRefused) {
  const std::string p = writeRaw("j.bin", {kTokenShardMagic, 2, 2}, std::vector<char>(8 + 3));
  const std::string msg = errorOf<ConfigError>([&] { TokenShard s(p); });
  EXPECT_THAT(msg, HasSubstr(p));
  EXPECT_THAT(msg, HasSubstr("3 trailing bytes"));
  EXPECT_THAT(msg, HasSubstr("expected exactly 1032 bytes"));
}

TEST_F(TokenShardTest, ShortHeaderAndNegativeCountAreRefused) {
  { std::ofstream(path("short.bin")) << "tiny"; }
  const std::string msg = errorOf<ConfigError>([&] { TokenShard s(path("short.bin")); });
  EXPECT_THAT(msg, HasSubstr(path("short.bin")));
  EXPECT_THAT(msg, HasSubstr("has 4 bytes; expected at least the 1024-byte header"));
  const std::string p = writeRaw("neg.bin", {kTokenShardMagic, 1, -5}, {});
  EXPECT_THAT(errorOf<ConfigError>([&] { TokenShard s(p); }), HasSubstr("token count -5; expected >= 0"));
}

TEST_F(TokenShardTest, TokenOutsideTheModelVocabularyIsNamedByOffset) {
  writeTokenShard(path("v.bin"), {1, 2, 3, 4, 5, 6, 7, 999, 8}, 50257);
  EXPECT_NO_THROW(TokenShard(path("v.bin"), 1000));
  const std::string msg = errorOf<ConfigError>([&] { TokenShard s(path("v.bin"), 999); });
  EXPECT_THAT(msg, HasSubstr(path("v.bin")));
  EXPECT_THAT(msg, HasSubstr("token 999 at token offset 7"));
  EXPECT_THAT(msg, HasSubstr("vocabulary size 999; expected token ids in [0, 999)"));
  writeTokenShard(path("w.bin"), {5, 100000}, 200000);
  EXPECT_THAT(errorOf<ConfigError>([&] { TokenShard s(path("w.bin"), 50000); }),
              HasSubstr("token 100000 at token offset 1"));
}

TEST_F(TokenShardTest, FifoIsRefusedWithoutWaitingForAWriter) {
  const std::string p = path("fifo.bin");
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  const std::string msg = errorOf<ConfigError>([&] { TokenShard s(p); });
  EXPECT_THAT(msg, HasSubstr(p));
  EXPECT_THAT(msg, HasSubstr("is a FIFO (named pipe); expected a regular file"));
}

TEST_F(TokenShardTest, DevicesDirectoriesAndMissingFilesAreRefused) {
  const std::string zero = errorOf<ConfigError>([] { TokenShard s("/dev/zero"); });
  EXPECT_THAT(zero, HasSubstr("'/dev/zero' is a character device; expected a regular file"));
  const std::string directory = errorOf<ConfigError>([&] { TokenShard s(dir()); });
  EXPECT_THAT(directory, HasSubstr(dir() + "' is a directory; expected a regular file"));
  const std::string missing = errorOf<IoError>([&] { TokenShard s(path("missing.bin")); });
  EXPECT_THAT(missing, HasSubstr(path("missing.bin")));
  EXPECT_THAT(missing, HasSubstr("No such file or directory"));
}

TEST_F(TokenShardTest, DirectoryFindsTheSplitsShardsInNameOrder) {
  writeTokenShard(path("web_train_000002.bin"), {3, 4}, 10);
  writeTokenShard(path("web_train_000001.bin"), {1, 2}, 10);
  writeTokenShard(path("web_val_000000.bin"), {9}, 10);
  writeTokenShard(path(".web_train_000000.bin"), {0}, 10);  // hidden: a writer's temp file
  { std::ofstream(path("notes.txt")) << "x"; }
  EXPECT_EQ(findTokenShards(dir(), "train"),
            (std::vector<std::string>{path("web_train_000001.bin"), path("web_train_000002.bin")}));
  EXPECT_EQ(findTokenShards(dir(), "val"), std::vector<std::string>{path("web_val_000000.bin")});
  EXPECT_EQ(findTokenShards(dir()).size(), 3u);
  EXPECT_EQ(findTokenShards(path("*_train_*.bin")),
            (std::vector<std::string>{path("web_train_000001.bin"), path("web_train_000002.bin")}));

  auto set = TokenShardSet::open(dir(), "train", 10);
  EXPECT_EQ(set->size(), 4);
  EXPECT_EQ(set->shards().size(), 2u);
  EXPECT_THAT(set->describe(), HasSubstr("2 token shards (4 tokens) from '" + dir() + "' (*_train_*.bin)"));
}

TEST_F(TokenShardTest, ReadsCrossShardBoundariesAndSkipEmptyShards) {
  writeTokenShard(path("s_train_1.bin"), {10, 11, 12}, 100);
  writeTokenShard(path("s_train_2.bin"), {}, 100);
  writeTokenShard(path("s_train_3.bin"), {13}, 100000);  // a version 2 shard in the series
  writeTokenShard(path("s_train_4.bin"), {14, 15}, 100);
  auto set = TokenShardSet::open(path("s_train_*.bin"));
  ASSERT_EQ(set->size(), 6);
  std::vector<int64_t> out(6);
  set->copyTokens(0, 6, out.data());
  EXPECT_EQ(out, (std::vector<int64_t>{10, 11, 12, 13, 14, 15}));
  std::vector<int64_t> mid(3);
  set->copyTokens(2, 3, mid.data());
  EXPECT_EQ(mid, (std::vector<int64_t>{12, 13, 14}));
  EXPECT_THROW(set->copyTokens(5, 2, mid.data()), std::out_of_range);
}

TEST_F(TokenShardTest, EmptyShardSetsAreRefusedNamingWhatWasLookedFor) {
  writeTokenShard(path("web_val_000000.bin"), {1}, 10);
  const std::string msg = errorOf<ConfigError>([&] { TokenShardSet::open(dir(), "train"); });
  EXPECT_THAT(msg, HasSubstr("'" + dir() + "' has no *_train_*.bin file"));
  EXPECT_THAT(msg, HasSubstr("expected llm.c's token shards"));
  const std::string pattern = path("*_train_*.bin");
  EXPECT_THAT(errorOf<ConfigError>([&] { TokenShardSet::open(pattern); }),
              HasSubstr("pattern '" + pattern + "' matches no file"));
  EXPECT_THAT(errorOf<ConfigError>([] { TokenShardSet({}, 0, "'nothing'"); }),
              HasSubstr("token shard set 'nothing' is empty; expected at least one shard file"));
}

TEST_F(TokenShardTest, ShardSetNamesTheBadShard) {
  writeTokenShard(path("x_train_1.bin"), {1, 2}, 10);
  writeRaw("x_train_2.bin", {kTokenShardMagic, 1, 4}, std::vector<char>(2));
  const std::string msg = errorOf<ConfigError>([&] { TokenShardSet::open(dir(), "train"); });
  EXPECT_THAT(msg, HasSubstr(path("x_train_2.bin")));
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

TEST(SyntheticTokens, ArePureFunctionsOfTheSeedAndInRange) {
  const std::vector<uint32_t> a = syntheticTokens(5000, 300, 7);
  EXPECT_EQ(a, syntheticTokens(5000, 300, 7));
  const std::vector<uint32_t> prefix = syntheticTokens(100, 300, 7);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), a.begin()));
  EXPECT_NE(a, syntheticTokens(5000, 300, 8));
  for (uint32_t t : a) ASSERT_LT(t, 300u);
  EXPECT_TRUE(syntheticTokens(0, 1, 0).empty());
  EXPECT_THAT(errorOf<ConfigError>([] { syntheticTokens(-1, 10, 0); }), HasSubstr("count is -1"));
}

}  // namespace
}  // namespace dtrain::data
