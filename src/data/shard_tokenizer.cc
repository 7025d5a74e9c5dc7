#include "data/shard_tokenizer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "data/text_files.h"

namespace dtrain::data {
namespace {

// `path` made absolute, its links resolved; as given when it does not exist.
std::string absolutePath(const std::string& path) {
  if (path.empty()) return path;
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return path;
  std::string absolute(resolved);
  std::free(resolved);
  return absolute;
}

// The sidecar of the series a shard belongs to, or "" when the shard's
// name is not <name>_train_NNNNNN.bin or <name>_val_NNNNNN.bin.
std::string sidecarOf(const std::string& shard) {
  const size_t slash = shard.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : shard.substr(0, slash);
  const std::string file = slash == std::string::npos ? shard : shard.substr(slash + 1);
  const size_t train = file.rfind("_train_"), val = file.rfind("_val_");
  size_t cut = train;
  if (cut == std::string::npos || (val != std::string::npos && val > cut)) cut = val;
  if (cut == std::string::npos || cut == 0) return "";
  return shardTokenizerPath(dir, file.substr(0, cut));
}

ShardTokenizer readSidecar(const std::string& path) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(readFileBytes(path));
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path + ": not valid JSON (" + e.what() + "); expected {\"kind\": ..., \"path\": ...} as "
                      "`dtrain tokenize` writes it");
  }
  const auto field = [&](const char* key) -> std::string {
    const auto it = json.is_object() ? json.find(key) : json.end();
    if (it == json.end() || !it->is_string()) {
      throw ConfigError(path + ": \"" + key + "\" is " + (it == json.end() ? "missing" : it->dump()) +
                        "; expected a string, as `dtrain tokenize` writes it");
    }
    return it->get<std::string>();
  };
  ShardTokenizer tokenizer{field("kind"), field("path")};
  if (tokenizer.kind.empty()) throw ConfigError(path + ": \"kind\" is \"\"; expected a tokenizer kind");
  return tokenizer;
}

}  // namespace

std::string shardTokenizerPath(const std::string& dir, const std::string& name) {
  return dir + "/" + name + "_tokenizer.json";
}

void writeShardTokenizer(const std::string& dir, const std::string& name, const ShardTokenizer& tokenizer,
                         int64_t vocab_size) {
  const nlohmann::json json = {
      {"kind", tokenizer.kind}, {"path", absolutePath(tokenizer.path)}, {"vocab_size", vocab_size}};
  const std::string path = shardTokenizerPath(dir, name);
  const std::string temp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << json.dump(2) << "\n";
    out.close();
    if (!out) {
      ::unlink(temp.c_str());
      throw IoError("cannot write " + path + " (the tokenizer of the shards beside it)");
    }
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    throw errnoError("rename", err, "cannot write " + path);
  }
}

std::optional<ShardTokenizer> shardTokenizer(const std::vector<std::string>& paths) {
  std::map<std::string, ShardTokenizer> found;  // sidecar -> what it names
  for (const std::string& shard : paths) {
    const std::string sidecar = sidecarOf(shard);
    if (sidecar.empty() || !isRegularFile(sidecar)) return std::nullopt;
    if (!found.contains(sidecar)) found.emplace(sidecar, readSidecar(sidecar));
  }
  if (found.empty()) return std::nullopt;
  const auto& [first_path, first] = *found.begin();
  for (const auto& [path, tokenizer] : found) {
    if (tokenizer.kind != first.kind || tokenizer.path != first.path) {
      throw ConfigError("the token shards were made by two tokenizers: " + first_path + " names " + first.kind +
                        (first.path.empty() ? "" : " (" + first.path + ")") + ", " + path + " names " +
                        tokenizer.kind + (tokenizer.path.empty() ? "" : " (" + tokenizer.path + ")") +
                        "; expected shards of one tokenizer");
    }
  }
  return first;
}

}  // namespace dtrain::data
