#include "data/hf_tokenizer_json.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "data/gpt2_vocabulary.h"
#include "data/text_files.h"
#include "data/utf8.h"

namespace dtrain::data {
namespace {

using nlohmann::json;

// The patterns there is a matcher for, as tokenizer.json spells them.
constexpr std::string_view kGpt2Pattern =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kLlama3Pattern = R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|)re"
                                            R"re(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kQwen2Pattern = R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|)re"
                                           R"re(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// The end-of-text tokens looked for when no tokenizer_config.json names one.
constexpr const char* kEndOfTextNames[] = {"<|endoftext|>", "<|end_of_text|>", "</s>"};

// A token as its UTF-8 in GPT-2's byte alphabet.
std::string writtenByte(unsigned char byte) {
  const char32_t cp = gpt2ByteAlphabet()[byte];
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
}

// One JSON file read field by field: every refusal names the file, the
// field's path and its value.
class JsonFile {
 public:
  explicit JsonFile(std::string path) : path_(std::move(path)) {
    try {
      root_ = json::parse(readFileBytes(path_));
    } catch (const json::exception& e) {
      throw ConfigError(path_ + ": not valid JSON (" + e.what() + ")");
    }
    if (!root_.is_object()) refuse("the top level", &root_, "a JSON object");
  }

  const json& root() const { return root_; }
  const std::string& path() const { return path_; }

  [[noreturn]] void refuse(const std::string& field, const json* value, const std::string& expected) const {
    std::string shown = value == nullptr ? "missing" : value->dump();
    if (shown.size() > 200) shown = shown.substr(0, 200) + "...";
    throw ConfigError(path_ + ": " + field + " is " + shown + "; expected " + expected);
  }

  // object[key], or nullptr when absent.
  static const json* find(const json& object, const std::string& key) {
    const auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  }
  // object[key] as a string; refused when absent or not a string.
  std::string text(const json& object, const std::string& field, const std::string& key) const {
    const json* value = find(object, key);
    if (value == nullptr || !value->is_string()) refuse(field + "." + key, value, "a string");
    return value->get<std::string>();
  }
  // object[key] as a bool (`otherwise` when absent or null).
  bool flag(const json& object, const std::string& field, const std::string& key, bool otherwise) const {
    const json* value = find(object, key);
    if (value == nullptr || value->is_null()) return otherwise;
    if (!value->is_boolean()) refuse(field + "." + key, value, "true or false");
    return value->get<bool>();
  }

 private:
  std::string path_;
  json root_;
};

class TokenizerJson {
 public:
  explicit TokenizerJson(const std::string& path) : file_(path) {}

  void read() {
    const json& root = file_.root();
    const json* model = JsonFile::find(root, "model");
    if (model == nullptr || !model->is_object()) file_.refuse("model", model, "a BPE model (an object)");
    // Ids are dense, near 0 .. tokens - 1: a far one is refused before it
    // sizes the id table.
    const json* vocab = JsonFile::find(*model, "vocab");
    const json* added = JsonFile::find(root, "added_tokens");
    id_limit_ = (vocab != nullptr ? vocab->size() : 0) + (added != nullptr ? added->size() : 0) + 65536;
    readModel(*model);
    readAddedTokens(JsonFile::find(root, "added_tokens"));
    const json* normalizer = JsonFile::find(root, "normalizer");
    spec_.nfc = normalizer != nullptr && normalizer->is_object() && normalizer->value("type", json()) == "NFC";
    if (normalizer != nullptr && !normalizer->is_null() && !spec_.nfc) {
      file_.refuse("normalizer", normalizer, "null or {\"type\": \"NFC\"} (the normalizers dtrain has)");
    }
    spec_.split = readPreTokenizer(JsonFile::find(root, "pre_tokenizer"));
    const json* decoder = JsonFile::find(root, "decoder");
    if (decoder != nullptr && !decoder->is_null() &&
        !(decoder->is_object() && decoder->value("type", json()) == "ByteLevel")) {
      file_.refuse("decoder", decoder, "null or {\"type\": \"ByteLevel\"}");
    }
  }

  HfTokenizerSpec& spec() { return spec_; }

  // The id of a token named in another file (tokenizer_config.json): an
  // added token's content, else a vocabulary token as written.
  std::optional<uint32_t> idOf(const std::string& content) const {
    for (const HfAddedToken& token : spec_.added) {
      if (token.content == content) return token.id;
    }
    const auto it = written_ids_.find(content);
    return it == written_ids_.end() ? std::nullopt : std::optional<uint32_t>(it->second);
  }
  const std::vector<HfAddedToken>& added() const { return spec_.added; }

 private:
  void readModel(const json& model) {
    if (const json* type = JsonFile::find(model, "type"); type != nullptr && *type != "BPE") {
      file_.refuse("model.type", type, "\"BPE\" (dtrain reads byte-level BPE tokenizers: GPT-2, Llama 3, Qwen)");
    }
    if (const json* dropout = JsonFile::find(model, "dropout");
        dropout != nullptr && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0)) {
      file_.refuse("model.dropout", dropout, "null (dtrain merges deterministically)");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json* value = JsonFile::find(model, key);
      if (value != nullptr && !value->is_null() && *value != "") {
        file_.refuse(std::string("model.") + key, value, "null or \"\" (a byte-level BPE has none)");
      }
    }
    if (file_.flag(model, "model", "byte_fallback", false)) {
      file_.refuse("model.byte_fallback", JsonFile::find(model, "byte_fallback"),
                   "false (byte fallback is SentencePiece's way; a byte-level BPE has every byte)");
    }
    spec_.ignore_merges = file_.flag(model, "model", "ignore_merges", false);
    readVocab(JsonFile::find(model, "vocab"));
    readMerges(JsonFile::find(model, "merges"));
  }

  void readVocab(const json* vocab) {
    if (vocab == nullptr || !vocab->is_object() || vocab->empty()) {
      file_.refuse("model.vocab", vocab, "an object {\"token\": id, ...}");
    }
    for (const auto& [written, id_json] : vocab->items()) {
      const auto field = [&written = written] { return "model.vocab[" + json(written).dump() + "]"; };
      const int64_t id = checkedId(id_json, field);
      if (written.empty()) file_.refuse("a token of model.vocab", &id_json, "a non-empty string");
      if (static_cast<size_t>(id) >= spec_.tokens.size()) spec_.tokens.resize(id + 1);
      if (!spec_.tokens[id].empty()) file_.refuse(field(), &id_json, "an id no other token has");
      std::string bytes;
      if (!gpt2TokenBytes(written, bytes)) bytes = written;  // not byte-level: its UTF-8, as Hugging Face decodes it
      spec_.tokens[id] = bytes;
      written_ids_.emplace(written, static_cast<uint32_t>(id));
    }
    for (int b = 0; b < 256; ++b) {
      const std::string written = writtenByte(static_cast<unsigned char>(b));
      const auto it = written_ids_.find(written);
      if (it == written_ids_.end()) {
        throw ConfigError(file_.path() + ": model.vocab has no token \"" + written + "\" for byte " +
                          std::to_string(b) + "; expected one for each of the 256 bytes (a byte-level BPE)");
      }
      spec_.byte_ids[b] = it->second;
    }
    if (spec_.ignore_merges) {
      for (const auto& [written, id] : written_ids_) {
        std::string bytes;
        if (gpt2TokenBytes(written, bytes)) spec_.ids_by_bytes.emplace(bytes, id);
      }
    }
  }

  void readMerges(const json* merges) {
    if (merges == nullptr || !merges->is_array()) {
      file_.refuse("model.merges", merges, "an array of merges (\"left right\" or [\"left\", \"right\"])");
    }
    for (size_t i = 0; i < merges->size(); ++i) {
      const json& merge = (*merges)[i];
      std::string left, right;
      if (merge.is_string()) {
        const std::string text = merge.get<std::string>();
        const size_t space = text.find(' ');
        if (space != std::string::npos && text.find(' ', space + 1) == std::string::npos) {
          left = text.substr(0, space), right = text.substr(space + 1);
        }
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
        left = merge[0].get<std::string>(), right = merge[1].get<std::string>();
      }
      const std::string field = "model.merges[" + std::to_string(i) + "]";
      if (left.empty() || right.empty()) file_.refuse(field, &merge, "\"left right\" or [\"left\", \"right\"]");
      const auto l = written_ids_.find(left), r = written_ids_.find(right), m = written_ids_.find(left + right);
      if (l == written_ids_.end() || r == written_ids_.end() || m == written_ids_.end()) {
        file_.refuse(field, &merge, "two tokens of model.vocab whose concatenation is one too");
      }
      spec_.merges.add(l->second, r->second, m->second);
    }
  }

  void readAddedTokens(const json* added) {
    if (added == nullptr || added->is_null()) return;
    if (!added->is_array()) file_.refuse("added_tokens", added, "an array of tokens");
    for (size_t i = 0; i < added->size(); ++i) {
      const json& token = (*added)[i];
      const std::string field = "added_tokens[" + std::to_string(i) + "]";
      if (!token.is_object()) file_.refuse(field, &token, "an object {\"id\": ..., \"content\": ...}");
      const json* id = JsonFile::find(token, "id");
      if (id == nullptr) file_.refuse(field + ".id", id, "an integer id");
      HfAddedToken entry;
      entry.id = static_cast<uint32_t>(checkedId(*id, [&] { return field + ".id"; }));
      entry.content = file_.text(token, field, "content");
      if (entry.content.empty()) {
        file_.refuse(field + ".content", JsonFile::find(token, "content"), "a non-empty string");
      }
      for (const char* key : {"single_word", "lstrip", "rstrip"}) {
        if (file_.flag(token, field, key, false)) {
          file_.refuse(field + "." + key, JsonFile::find(token, key), "false (dtrain matches added tokens exactly)");
        }
      }
      entry.normalized = file_.flag(token, field, "normalized", !file_.flag(token, field, "special", false));
      if (entry.id >= spec_.tokens.size()) spec_.tokens.resize(entry.id + 1);
      spec_.tokens[entry.id] = entry.content;
      spec_.added.push_back(std::move(entry));
    }
  }

  // An id: an integer from 0 to below id_limit_.
  template <typename Field>
  int64_t checkedId(const json& id, const Field& field) const {
    const int64_t value = id.is_number_integer() ? id.get<int64_t>() : -1;
    if (value < 0 || value >= static_cast<int64_t>(id_limit_)) {
      file_.refuse(field(), &id, "an integer id from 0 to " + std::to_string(id_limit_ - 1) +
                                     " (the tokens' count + 65535: ids are dense)");
    }
    return value;
  }

  void checkByteLevel(const json& byte_level, const std::string& field, bool use_regex) const {
    if (file_.flag(byte_level, field, "add_prefix_space", false)) {
      file_.refuse(field + ".add_prefix_space", JsonFile::find(byte_level, "add_prefix_space"), "false");
    }
    if (file_.flag(byte_level, field, "use_regex", true) != use_regex) {
      file_.refuse(field + ".use_regex", JsonFile::find(byte_level, "use_regex"),
                   use_regex ? "true (a lone ByteLevel splits by GPT-2's pattern)"
                             : "false (the Split before it cuts the text)");
    }
  }

  PieceSplit readSplit(const json& split, const std::string& field) const {
    const json* pattern = JsonFile::find(split, "pattern");
    const json* regex = pattern != nullptr && pattern->is_object() ? JsonFile::find(*pattern, "Regex") : nullptr;
    if (regex == nullptr || !regex->is_string()) {
      file_.refuse(field + ".pattern", pattern, "{\"Regex\": ...} with one of the patterns dtrain has a matcher for");
    }
    const std::string text = regex->get<std::string>();
    PieceSplit kind;
    if (text == kLlama3Pattern) {
      kind = PieceSplit::kLlama3;
    } else if (text == kQwen2Pattern) {
      kind = PieceSplit::kQwen2;
    } else if (text == kGpt2Pattern) {
      kind = PieceSplit::kGpt2;
    } else {
      file_.refuse(field + ".pattern.Regex", regex,
                   "Llama 3's, Qwen 2's or GPT-2's pattern (dtrain has a hand-written matcher for each; "
                   "data/llama3_pretokenizer.h)");
    }
    if (const json* behavior = JsonFile::find(split, "behavior"); behavior == nullptr || *behavior != "Isolated") {
      file_.refuse(field + ".behavior", behavior, "\"Isolated\"");
    }
    if (file_.flag(split, field, "invert", false)) {
      file_.refuse(field + ".invert", JsonFile::find(split, "invert"), "false");
    }
    return kind;
  }

  PieceSplit readPreTokenizer(const json* pre) const {
    const char* expected = "{\"type\": \"ByteLevel\"} or a Sequence of a Split and a ByteLevel";
    const json* type = pre != nullptr && pre->is_object() ? JsonFile::find(*pre, "type") : nullptr;
    if (type == nullptr) file_.refuse("pre_tokenizer", pre, expected);
    if (*type == "ByteLevel") {
      checkByteLevel(*pre, "pre_tokenizer", true);
      return PieceSplit::kGpt2;
    }
    if (*type != "Sequence") file_.refuse("pre_tokenizer.type", type, expected);
    const json* steps = JsonFile::find(*pre, "pretokenizers");
    if (steps == nullptr || !steps->is_array() || steps->size() != 2) {
      file_.refuse("pre_tokenizer.pretokenizers", steps, "[a Split, a ByteLevel]");
    }
    const std::string first = "pre_tokenizer.pretokenizers[0]", second = "pre_tokenizer.pretokenizers[1]";
    if (!(*steps)[0].is_object() || (*steps)[0].value("type", json()) != "Split") {
      file_.refuse(first, &(*steps)[0], "a Split");
    }
    if (!(*steps)[1].is_object() || (*steps)[1].value("type", json()) != "ByteLevel") {
      file_.refuse(second, &(*steps)[1], "a ByteLevel");
    }
    checkByteLevel((*steps)[1], second, false);
    return readSplit((*steps)[0], first);
  }

  JsonFile file_;
  HfTokenizerSpec spec_;
  std::unordered_map<std::string, uint32_t> written_ids_;  // model.vocab as written -> id
  size_t id_limit_ = 0;
};

// tokenizer_config.json's bos_token / eos_token: a string, or an object
// with "content" (older transformers); nullopt when absent or null.
std::optional<std::string> specialTokenName(const JsonFile& config, const char* key) {
  const json* value = JsonFile::find(config.root(), key);
  if (value == nullptr || value->is_null()) return std::nullopt;
  if (value->is_string()) return value->get<std::string>();
  if (value->is_object()) return config.text(*value, key, "content");
  config.refuse(key, value, "a token (a string, or {\"content\": ...}) or null");
}

uint32_t endOfTextWithoutConfig(const TokenizerJson& reader, const std::string& dir) {
  for (const char* name : kEndOfTextNames) {
    for (const HfAddedToken& token : reader.added()) {
      if (token.content == name) return token.id;
    }
  }
  throw ConfigError(dir + "/tokenizer.json has none of the added tokens <|endoftext|>, <|end_of_text|>, </s> and "
                    "no tokenizer_config.json beside it names its eos_token; expected one of them (dtrain puts the "
                    "end-of-text token between documents)");
}

}  // namespace

HfTokenizerSpec readHfTokenizer(const std::string& dir) {
  if (!isDirectory(dir)) {
    throw ConfigError("tokenizer directory " + dir + " does not exist; expected a directory holding a Hugging Face "
                      "tokenizer.json");
  }
  const std::string path = dir + "/tokenizer.json";
  if (!isRegularFile(path)) {
    throw ConfigError("tokenizer directory " + dir + " has no tokenizer.json; expected a Hugging Face tokenizer.json "
                      "(a byte-level BPE: GPT-2, Llama 3, Qwen) there");
  }
  TokenizerJson reader(path);
  reader.read();
  HfTokenizerSpec& spec = reader.spec();
  const std::string config_path = dir + "/tokenizer_config.json";
  std::optional<uint32_t> eos;
  if (isRegularFile(config_path)) {
    const JsonFile config(config_path);
    for (const char* key : {"bos_token", "eos_token"}) {
      const std::optional<std::string> name = specialTokenName(config, key);
      if (!name) continue;
      const std::optional<uint32_t> id = reader.idOf(*name);
      if (!id) {
        const json shown = *name;
        config.refuse(key, &shown, "a token of " + path + " (an added token or one of model.vocab)");
      }
      (key == std::string("bos_token") ? spec.bos : eos) = *id;
    }
  }
  spec.eos = eos ? *eos : endOfTextWithoutConfig(reader, dir);
  return std::move(spec);
}

}  // namespace dtrain::data
