#include "checkpoint/hf_tokenizer_files.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "common/error.h"
#include "common/files.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

void copyInto(const std::string& from, const std::string& dir, const std::string& name) {
  std::error_code error;
  fs::copy_file(from, dir + "/" + name, fs::copy_options::overwrite_existing, error);
  if (error) throw IoError("'" + dir + "/" + name + "': cannot be written from " + from + ": " + error.message());
}

void writeJson(const std::string& dir, const std::string& name, const nlohmann::json& j) {
  std::ofstream out(dir + "/" + name);
  out << j.dump(2) << "\n";
  if (!out) throw IoError("'" + dir + "/" + name + "': cannot be written");
}

std::string fileList(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& n : names) text += (text.empty() ? "" : ", ") + n;
  return text;
}

std::vector<std::string> hfFiles(const std::string& source, const std::string& dir) {
  std::vector<std::string> written;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    if (!isRegularFile(source + "/" + name)) continue;
    copyInto(source + "/" + name, dir, name);
    written.push_back(name);
  }
  return written;
}

std::vector<std::string> gpt2Files(const std::string& source, const std::string& dir, int64_t max_length) {
  const bool npm = isRegularFile(source + "/encoder.json");
  copyInto(source + (npm ? "/encoder.json" : "/vocab.json"), dir, "vocab.json");
  copyInto(source + (npm ? "/vocab.bpe" : "/merges.txt"), dir, "merges.txt");
  const std::string end = "<|endoftext|>";
  writeJson(dir, "tokenizer_config.json",
            {{"tokenizer_class", "GPT2Tokenizer"}, {"model_max_length", max_length}, {"bos_token", end},
             {"eos_token", end}, {"unk_token", end}, {"add_prefix_space", false}});
  return {"vocab.json", "merges.txt", "tokenizer_config.json"};
}

std::vector<std::string> sentencepieceFiles(const std::string& source, const std::string& dir, int64_t max_length) {
  copyInto(source, dir, "tokenizer.model");
  writeJson(dir, "tokenizer_config.json",
            {{"tokenizer_class", "LlamaTokenizer"}, {"model_max_length", max_length}, {"legacy", true}});
  return {"tokenizer.model", "tokenizer_config.json"};
}

}  // namespace

std::string writeHfTokenizerFiles(const nlohmann::json& meta, const std::string& dir, int64_t model_max_length) {
  const auto saved = meta.find("tokenizer");
  if (saved == meta.end() || !saved->is_object()) {
    return "no tokenizer files: the checkpoint names no tokenizer (give the model's tokenizer files yourself)";
  }
  const std::string kind = saved->value("kind", std::string()), source = saved->value("path", std::string());
  if (kind == "byte") return "no tokenizer files: the byte tokenizer has no Hugging Face form";
  const bool present = kind == "sentencepiece" ? isRegularFile(source) : isDirectory(source);
  if (kind.empty() || source.empty() || !present) {
    return "no tokenizer files: the checkpoint's tokenizer (" + (kind.empty() ? std::string("?") : kind) + ", " +
           (source.empty() ? std::string("no path") : source) + ") is not on this machine";
  }
  std::vector<std::string> written;
  if (kind == "hf") written = hfFiles(source, dir);
  if (kind == "gpt2") written = gpt2Files(source, dir, model_max_length);
  if (kind == "sentencepiece") written = sentencepieceFiles(source, dir, model_max_length);
  if (written.empty()) return "no tokenizer files: kind " + kind + " at " + source + " has none to write";
  return "tokenizer " + kind + " from " + source + " (" + fileList(written) + ")";
}

}  // namespace dtrain
