#include "checkpoint/meta_checks.h"

#include <limits>
#include <map>

#include "common/error.h"
#include "common/log.h"

namespace dtrain {
namespace {

// As many ranks as RANK may name (cli/main.cc reads it up to this).
constexpr int64_t kMaxWorldSize = int64_t{1} << 24;
// A value quoted in an error stays one short line whatever the file holds.
constexpr size_t kMaxQuoted = 60;

std::string quoted(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > kMaxQuoted) text = text.substr(0, kMaxQuoted) + "...";
  return text;
}

class MetaChecker {
 public:
  MetaChecker(const std::string& file, const nlohmann::json& meta, MetaFields fields)
      : file_(file), meta_(meta), all_(fields == MetaFields::kAllForResume) {}

  // The field as an integer in [low, high]; `fallback` when absent and not required.
  int64_t integer(const char* name, int64_t low, int64_t high, bool required, int64_t fallback = 0) const {
    const std::string expected = std::string(low == 0 ? "a non-negative" : low == 1 ? "a positive" : "an") +
                                 " integer (at most " + std::to_string(high) + ")";
    const nlohmann::json* value = find(name, required, expected);
    if (value == nullptr) return fallback;
    bool fits = false;
    int64_t n = 0;
    if (value->is_number_unsigned()) {
      const uint64_t u = value->get<uint64_t>();
      fits = u <= static_cast<uint64_t>(high);
      n = fits ? static_cast<int64_t>(u) : 0;
    } else if (value->is_number_integer()) {
      n = value->get<int64_t>();
      fits = true;
    }
    if (!fits || n < low || n > high) fail(name, expected, *value);
    return n;
  }

  // A seed is any 64-bit unsigned integer.
  void unsignedInteger(const char* name) const {
    const nlohmann::json* value = find(name, false, "a non-negative integer");
    if (value == nullptr) return;
    if (value->is_number_unsigned()) return;
    if (!value->is_number_integer() || value->get<int64_t>() < 0) fail(name, "a non-negative integer", *value);
  }

  std::string text(const char* name, bool required) const {
    const nlohmann::json* value = find(name, required, "a non-empty string");
    if (value == nullptr) return "";
    if (!value->is_string() || value->get<std::string>().empty()) fail(name, "a non-empty string", *value);
    return value->get<std::string>();
  }

  void tensorLayout() const {
    const std::string expected = std::string("\"") + kParameterLayout + "\"";
    const nlohmann::json* value = find("tensor_layout", false, expected);
    if (value != nullptr && *value != kParameterLayout) fail("tensor_layout", expected, *value);
  }

  // "model_config" (a language model's config), "lora" (its adapters):
  // string pairs, returned.
  std::map<std::string, std::string> stringPairs(const char* name) const {
    const char* expected = "an object of strings";
    const nlohmann::json* value = find(name, false, expected);
    if (value == nullptr) return {};
    if (!value->is_object()) fail(name, expected, *value);
    std::map<std::string, std::string> pairs;
    for (const auto& [key, item] : value->items()) {
      if (!item.is_string()) fail((std::string(name) + "." + key).c_str(), "a string", item);
      pairs[key] = item.get<std::string>();
    }
    return pairs;
  }

  // "tokenizer": {kind, path}, what `dtrain generate` rebuilds the tokenizer from.
  void tokenizer() const {
    const char* expected = "an object with a string \"kind\" and \"path\"";
    const nlohmann::json* value = find("tokenizer", false, expected);
    if (value == nullptr) return;
    if (!value->is_object()) fail("tokenizer", expected, *value);
    const auto kind = value->find("kind");
    if (kind == value->end() || !kind->is_string() || kind->get<std::string>().empty()) {
      fail("tokenizer.kind", "a non-empty string", kind == value->end() ? nlohmann::json() : *kind);
    }
    const auto path = value->find("path");
    if (path != value->end() && !path->is_string()) fail("tokenizer.path", "a string", *path);
  }

 private:
  const nlohmann::json* find(const char* name, bool required, const std::string& expected) const {
    const auto it = meta_.find(name);
    if (it != meta_.end()) return &*it;
    if (required && all_) {
      throw ConfigError("checkpoint " + file_ + ": field '" + name + "' is missing; expected " + expected);
    }
    return nullptr;
  }

  [[noreturn]] void fail(const char* name, const std::string& expected, const nlohmann::json& got) const {
    throw ConfigError("checkpoint " + file_ + ": field '" + name + "': expected " + expected + ", got " +
                      quoted(got));
  }

  const std::string& file_;
  const nlohmann::json& meta_;
  bool all_;
};

}  // namespace

TrainCheckpointMeta checkTrainCheckpointMeta(const std::string& file, const nlohmann::json& meta, MetaFields fields) {
  if (!meta.is_object()) {
    throw ConfigError("checkpoint " + file + ": its meta is " + quoted(meta) + ", expected a JSON object");
  }
  const MetaChecker check(file, meta, fields);
  TrainCheckpointMeta out;
  out.step = check.integer("step", 0, kMaxSteps, true);
  out.epoch = check.integer("epoch", 0, kMaxEpochs, true);
  out.batch = check.integer("batch", 0, kMaxSteps, true);
  out.world_size = check.integer("world_size", 1, kMaxWorldSize, true);
  out.data_ranks = check.integer("data_ranks", 1, kMaxWorldSize, false);
  check.integer("tp", 1, kMaxWorldSize, false);
  out.batch_size = check.integer("batch_size", 1, kMaxBatch, true);
  out.model = check.text("model", true);
  out.dataset = check.text("dataset", false);
  out.optimizer = check.text("optimizer", true);
  check.unsignedInteger("seed");
  check.tensorLayout();
  check.stringPairs("model_config");
  out.lora = check.stringPairs("lora");
  check.tokenizer();
  return out;
}

}  // namespace dtrain
