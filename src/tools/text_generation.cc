#include "tools/text_generation.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "common/error.h"
#include "common/files.h"
#include "data/tokenizer.h"
#include "dtrain/amp.h"
#include "dtrain/checkpoint.h"
#include "models/hf_checkpoint.h"
#include "models/hf_config.h"
#include "models/kv_cache.h"
#include "models/language_model.h"
#include "models/lm_config.h"
#include "checkpoint/checkpoint_tools.h"
#include "checkpoint/lora_merge.h"
#include "train/train_step.h"

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string shapeText(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// The language model the checkpoint's meta "model_config" describes.
models::LanguageModelConfig configOf(const std::string& path, const nlohmann::json& meta) {
  const auto config = meta.find("model_config");
  if (config == meta.end() || !config->is_object()) {
    const std::string model = meta.contains("model") && meta["model"].is_string() ? meta["model"].get<std::string>()
                                                                                   : std::string("?");
    throw ConfigError("checkpoint " + path + " (model '" + model +
                      "') holds no language-model config (meta \"model_config\"); `dtrain generate` needs a "
                      "checkpoint of a gpt2 or llama model");
  }
  std::map<std::string, std::string> pairs;
  for (const auto& [key, value] : config->items()) {
    if (!value.is_string()) throw ConfigError("checkpoint " + path + ": model_config." + key + " is not a string");
    pairs[key] = value.get<std::string>();
  }
  try {
    return models::languageModelFromMetadata(pairs);
  } catch (const ConfigError& e) {
    throw ConfigError("checkpoint " + path + ": model_config: " + e.message());
  }
}

// Copies every parameter's saved "model.param.<name>" into the model.
void loadParameters(models::LanguageModel& lm, const std::string& path,
                    const std::map<std::string, torch::Tensor>& saved) {
  torch::NoGradGuard no_grad;
  for (auto& item : lm.named_parameters(/*recurse=*/true)) {
    const std::string key = "model.param." + item.key();
    const auto found = saved.find(key);
    if (found == saved.end()) {
      throw ConfigError("checkpoint " + path + " has no '" + key + "', a parameter of the " + lm.config().name +
                        " its model_config describes");
    }
    if (found->second.sizes() != item.value().sizes()) {
      throw ConfigError("checkpoint " + path + ": '" + key + "' has shape " + shapeText(found->second) +
                        ", but the model its model_config describes has " + shapeText(item.value()));
    }
    item.value().copy_(found->second);
  }
}

// The tokenizer: the checkpoint's meta "tokenizer", the flags over it.
std::unique_ptr<data::Tokenizer> chooseTokenizer(const GenerateOptions& o, const std::string& path,
                                                 const nlohmann::json& meta) {
  std::string kind, dir;
  const auto saved = meta.find("tokenizer");
  if (saved != meta.end() && saved->is_object()) {
    kind = saved->value("kind", std::string());
    dir = saved->value("path", std::string());
  }
  const bool given = o.tokenizer != TokenizerKind::kUnset;
  const bool from_flags = given || !o.tokenizer_dir.empty();
  if (given && tokenizerKindName(o.tokenizer) != kind) dir.clear();  // the saved path was for another kind
  if (given) kind = tokenizerKindName(o.tokenizer);
  if (!o.tokenizer_dir.empty()) {
    dir = o.tokenizer_dir;
    try {
      if (!given) kind = data::tokenizerKindAt(dir);
    } catch (const ConfigError& e) {
      throw ConfigError("--tokenizer-dir without --tokenizer: " + e.message());
    }
  }
  if (kind.empty()) {
    throw ConfigError("checkpoint " + path +
                      " names no tokenizer (a model trained on token shards that `dtrain tokenize` did not write, "
                      "or a Hugging Face directory without tokenizer files): "
                      "give --tokenizer (byte, gpt2, sentencepiece or hf) and, but for byte, --tokenizer-dir");
  }
  try {
    return data::makeTokenizer(kind, dir);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(from_flags ? "--tokenizer " : "the tokenizer of checkpoint " + path + ", ") + kind +
                      (dir.empty() ? "" : " (" + dir + ")") + ": " + e.message());
  }
}

torch::Device pickDevice(GenerateDevice device) {
  const bool cuda = torch::cuda::is_available();
  if (device == GenerateDevice::kCuda && !cuda) {
    throw ConfigError("--device cuda: no CUDA device is available to this libtorch; expected --device cpu or auto");
  }
  return device == GenerateDevice::kCuda || (device == GenerateDevice::kAuto && cuda) ? torch::Device(torch::kCUDA)
                                                                                      : torch::Device(torch::kCPU);
}

// How far back the model looks. GPT-2's learned positions past the length
// it was trained at (seq_len) were never trained: it sees the last seq_len
// tokens, a window that slides as the text grows (as nanoGPT crops its
// context). Rotary positions (llama) have no such table: the whole context,
// up to max_seq_len; past the trained length the run says so.
int64_t windowOf(const models::LanguageModelConfig& c) {
  return c.family == models::LmFamily::kGpt2 ? c.seq_len : 0;
}

// The prompt's tokens, after the begin-of-text token of a tokenizer that has
// one (Llama 3: documents were framed so, data/tokenizer.h), else the
// end-of-text token alone for an empty prompt; checked against the model's
// vocabulary and positions.
struct PromptTokens {
  std::vector<int64_t> tokens;
  size_t framing = 0;  // tokens before the prompt's own
};

PromptTokens contextTokens(const GenerateOptions& o, const data::Tokenizer& tokenizer,
                           const models::LanguageModelConfig& c) {
  if (tokenizer.vocabSize() > c.vocab_size) {
    throw ConfigError("tokenizer " + tokenizer.name() + " has " + std::to_string(tokenizer.vocabSize()) +
                      " ids, more than the model's vocabulary of " + std::to_string(c.vocab_size) +
                      " (was it trained with another --tokenizer?)");
  }
  const std::vector<uint32_t> ids = tokenizer.encode(o.prompt);
  const data::DocumentFrame frame = data::documentFrame(tokenizer);
  PromptTokens context;
  if (frame.after || ids.empty()) context.tokens.push_back(frame.before);
  context.framing = context.tokens.size();
  context.tokens.insert(context.tokens.end(), ids.begin(), ids.end());
  if (windowOf(c) > 0) return context;  // any length: the window slides
  const int64_t prompt = static_cast<int64_t>(context.tokens.size()), limit = c.max_seq_len;
  if (prompt >= limit) {
    throw ConfigError("--prompt: " + std::to_string(prompt) + " tokens, but the model has " + std::to_string(limit) +
                      " positions; expected at most " + std::to_string(limit - 1) +
                      " tokens, to leave room for new ones");
  }
  if (prompt + o.max_new_tokens > limit) {
    throw ConfigError("--max-new-tokens " + std::to_string(o.max_new_tokens) + ": the prompt's " +
                      std::to_string(prompt) + " tokens and the new ones must fit the model's " +
                      std::to_string(limit) + " positions; expected at most " + std::to_string(limit - prompt));
  }
  return context;
}

// Draws the next token from the logits of the last position.
class TokenSampler {
 public:
  // `vocab`: the tokenizer's ids (a model's padded rows are never drawn).
  TokenSampler(const GenerateOptions& o, int64_t vocab, torch::Device device)
      : temperature_(o.temperature),
        top_k_(o.top_k),
        vocab_(vocab),
        generator_(at::globalContext().defaultGenerator(device)) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_current_seed(o.seed);
  }

  int64_t next(const torch::Tensor& logits) {
    torch::Tensor scores = logits.to(torch::kFloat).narrow(0, 0, vocab_);
    if (temperature_ == 0) return scores.argmax().item<int64_t>();
    scores = scores / temperature_;
    if (top_k_ > 0 && top_k_ < vocab_) {
      const torch::Tensor kth = std::get<0>(scores.topk(top_k_)).select(0, top_k_ - 1);
      scores = scores.masked_fill(scores < kth, -std::numeric_limits<double>::infinity());
    }
    return torch::multinomial(torch::softmax(scores, -1), 1, /*replacement=*/false, generator_).item<int64_t>();
  }

 private:
  double temperature_;
  int64_t top_k_, vocab_;
  at::Generator generator_;
};

struct Completion {
  std::vector<int64_t> tokens;  // without the end-of-text token
  bool ended = false;           // stopped at the end-of-text token
  double first_token_s = 0;     // the prompt's forward and the first draw
  double total_s = 0;
};

// Feeds the context once, then each drawn token, through the KV cache.
// With a window (windowOf), the model sees at most its last `window`
// tokens: once the cache holds that many, each new token re-reads the
// window's last tokens afresh (positions from 0), as a model of learned
// positions was trained to see them.
Completion complete(models::LanguageModel& lm, const std::vector<int64_t>& context, int64_t max_new_tokens,
                    TokenSampler& sampler, int64_t eot, torch::Device device, Precision precision, int64_t window) {
  AutocastGuard autocast(device, precision);
  const auto cache_options =
      torch::TensorOptions().device(device).dtype(precision == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat);
  const int64_t whole = static_cast<int64_t>(context.size()) + max_new_tokens - 1;
  const int64_t capacity = window > 0 ? std::min(window, whole) : whole;
  std::optional<models::KvCache> cache;
  const auto index = torch::TensorOptions().dtype(torch::kLong);
  std::vector<int64_t> text = context;
  // A fresh cache over the text's last `capacity` tokens.
  const auto reread = [&] {
    cache.emplace(lm.config(), 1, capacity, cache_options);
    const int64_t from = std::max<int64_t>(0, static_cast<int64_t>(text.size()) - capacity);
    const std::vector<int64_t> seen(text.begin() + from, text.end());
    return lm.forwardCached(torch::tensor(seen, index).view({1, -1}).to(device), *cache);
  };
  Completion out;
  const auto start = Clock::now();
  torch::Tensor logits = reread();
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const int64_t token = sampler.next(logits.select(0, 0).select(0, -1));
    if (i == 0) out.first_token_s = secondsSince(start);
    if (token == eot) {
      out.ended = true;
      break;
    }
    out.tokens.push_back(token);
    text.push_back(token);
    if (i + 1 == max_new_tokens) break;
    if (cache->length() < cache->capacity()) {
      logits = lm.forwardCached(torch::full({1, 1}, token, index.device(device)), *cache);
    } else {
      logits = reread();  // the window slides
    }
  }
  out.total_s = secondsSince(start);
  return out;
}

std::string describe(const std::string& path, const models::LanguageModelConfig& c, const data::Tokenizer& tokenizer,
                     torch::Device device, Precision precision) {
  std::ostringstream out;
  out << "dtrain generate: " << path << " (" << c.name << ", " << c.layers << " layers, dim " << c.dim << ", "
      << c.heads << " heads, vocab " << c.vocab_size << ", trained on " << c.seq_len << " of its " << c.max_seq_len
      << " positions" << (windowOf(c) > 0 ? "; it sees the last " + std::to_string(windowOf(c)) + " tokens" : "")
      << "), tokenizer " << tokenizer.name() << ", " << device.str() << ", " << precisionName(precision);
  return out.str();
}

// A rotary model asked past the length it was trained at: it runs, and says so.
void notePastTheTrainedLength(const models::LanguageModelConfig& c, int64_t prompt, int64_t max_new_tokens) {
  if (windowOf(c) > 0 || prompt + max_new_tokens <= c.seq_len) return;
  std::fprintf(stderr,
               "dtrain generate: warning: the prompt's %lld tokens and up to %lld new ones pass the %lld positions "
               "the model was trained on (--seq-len); rotary positions beyond them were never trained, so the text "
               "may degrade there\n",
               static_cast<long long>(prompt), static_cast<long long>(max_new_tokens),
               static_cast<long long>(c.seq_len));
}

void printTiming(const Completion& done, int64_t prompt_tokens) {
  const double rest = done.total_s - done.first_token_s;
  const int64_t drawn = static_cast<int64_t>(done.tokens.size()) + (done.ended ? 1 : 0);
  std::fprintf(stderr,
               "dtrain generate: %zu new tokens in %.3f s (%.1f tokens/s); prompt of %lld tokens and the first "
               "token in %.3f s, then %.1f tokens/s%s\n",
               done.tokens.size(), done.total_s, done.total_s > 0 ? drawn / done.total_s : 0.0,
               static_cast<long long>(prompt_tokens), done.first_token_s,
               rest > 0 && drawn > 1 ? (drawn - 1) / rest : 0.0, done.ended ? "; stopped at the end-of-text token" : "");
}

// The model to generate with, where it came from, and the meta that names
// its tokenizer.
struct LoadedModel {
  std::string path;
  models::LanguageModelConfig config;
  nlohmann::json meta;
  std::shared_ptr<models::LanguageModel> lm;
};

// A Hugging Face model directory (config.json beside its weights, as
// `dtrain train --init-from` takes it), its tokenizer the one it ships
// (tokenizer.json, or GPT-2's vocab.json + merges.txt) where it has one.
LoadedModel loadHfDirectory(const std::string& dir) {
  LoadedModel m;
  m.path = dir;
  m.config = models::readHfConfig(dir);
  m.lm = models::createLanguageModel(m.config);
  models::loadHfWeights(*m.lm, dir);
  try {
    m.meta["tokenizer"] = {{"kind", data::tokenizerKindAt(dir)}, {"path", dir}};
  } catch (const ConfigError&) {
    // no tokenizer files: the flags must name one (chooseTokenizer says so)
  }
  return m;
}

LoadedModel loadTrainCheckpoint(const std::string& given) {
  auto [path, state] = loadNamedModel(given, "--checkpoint");
  LoadedModel m{path, configOf(path, state.meta), state.meta, nullptr};
  if (state.meta.contains("lora")) {
    m.lm = mergedLoraModel(*openNamedCheckpoint(path, "--checkpoint"));  // a LoRA run's adapters over its base
  } else {
    m.lm = models::createLanguageModel(m.config);
    loadParameters(*m.lm, path, state.tensors);
  }
  return m;
}

}  // namespace

int runGeneration(const GenerateOptions& o) {
  checkGenerateOptions(o);
  const bool hf = isDirectory(o.checkpoint) && isRegularFile(o.checkpoint + "/config.json");
  const LoadedModel loaded = hf ? loadHfDirectory(o.checkpoint) : loadTrainCheckpoint(o.checkpoint);
  const std::string& path = loaded.path;
  const models::LanguageModelConfig& config = loaded.config;
  const std::unique_ptr<data::Tokenizer> tokenizer = chooseTokenizer(o, path, loaded.meta);
  const PromptTokens context = contextTokens(o, *tokenizer, config);
  const torch::Device device = pickDevice(o.device);
  const Precision precision = autocastPrecision(o.precision);
  const std::shared_ptr<models::LanguageModel> lm = loaded.lm;
  lm->to(device);
  lm->eval();
  std::fprintf(stderr, "%s\n", describe(path, config, *tokenizer, device, precision).c_str());
  notePastTheTrainedLength(config, static_cast<int64_t>(context.tokens.size()), o.max_new_tokens);

  TokenSampler sampler(o, tokenizer->vocabSize(), device);
  const Completion done =
      complete(*lm, context.tokens, o.max_new_tokens, sampler, tokenizer->eotToken(), device, precision,
               windowOf(config));
  // The prompt as given (the framing token left out) and the completion,
  // decoded together so a character split between them stays whole.
  std::vector<uint32_t> ids(context.tokens.begin() + static_cast<std::ptrdiff_t>(context.framing),
                            context.tokens.end());
  ids.insert(ids.end(), done.tokens.begin(), done.tokens.end());
  const std::string text = tokenizer->decode(ids) + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  printTiming(done, static_cast<int64_t>(context.tokens.size()));
  return 0;
}

}  // namespace dtrain

extern "C" int dtrain_run_generate(const dtrain::GenerateOptions* options) {
  return dtrain::runGeneration(*options);
}
