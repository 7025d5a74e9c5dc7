#include "checkpoint/checkpoint_tools.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "checkpoint/checkpoint_file_writer.h"
#include "checkpoint/checkpoint_sharded.h"
#include "checkpoint/hf_tokenizer_files.h"
#include "checkpoint/lora_merge.h"
#include "checkpoint/meta_checks.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "common/units.h"
#include "models/hf_checkpoint.h"
#include "models/safetensors.h"

namespace dtrain {
namespace {

const std::string kParam = "model.param.", kBuffer = "model.buffer.", kOptimizer = "optimizer.";

bool startsWith(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

int64_t fileBytes(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 ? static_cast<int64_t>(info.st_size) : -1;
}

int64_t checkpointBytes(const CheckpointReader& reader) {
  int64_t bytes = 0;
  for (const auto& file : reader.files()) bytes += static_cast<int64_t>(file.second);
  return bytes;
}

std::string metaText(const nlohmann::json& meta, const char* key) {
  const auto it = meta.find(key);
  if (it == meta.end()) return "-";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// Every tensor name, aliases included (a tied weight under each of its names).
std::vector<std::string> allNames(const CheckpointReader& reader) {
  std::vector<std::string> names;
  for (const CheckpointTensorInfo& t : reader.tensors()) names.push_back(t.name);
  for (const auto& [alias, target] : reader.aliases()) names.push_back(alias);
  std::sort(names.begin(), names.end());
  return names;
}

struct Group {
  int tensors = 0;
  int64_t elements = 0;
  int64_t bytes = 0;
  void add(const CheckpointTensorInfo& t) {
    ++tensors;
    elements += t.numel();
    bytes += t.numel() * static_cast<int64_t>(c10::elementSize(t.dtype));
  }
};

std::string groupText(const char* name, const Group& g) {
  std::ostringstream out;
  out << "  " << name << ": " << g.tensors << " tensor(s), " << g.elements << " elements, " << g.bytes
      << " bytes\n";
  return out.str();
}

void printLayout(std::ostream& out, const CheckpointReader& reader) {
  out << "checkpoint " << reader.path() << " (" << checkpointBytes(reader) << " bytes";
  if (reader.sharded()) {
    out << "; sharded: " << reader.worldSize() << " shard(s) written with --shard " << reader.stage() << ")\n";
    const auto files = reader.files();
    for (size_t i = 0; i + 1 < files.size(); ++i) {
      out << "  shard " << files[i].first.substr(files[i].first.rfind('/') + 1) << ": " << files[i].second
          << " bytes\n";
    }
  } else {
    out << ")\n";
  }
}

void printInfo(const CheckpointReader& reader) {
  const nlohmann::json& meta = reader.meta();
  std::ostringstream out;
  printLayout(out, reader);
  out << "  step " << metaText(meta, "step") << ", epoch " << metaText(meta, "epoch") << ", batch "
      << metaText(meta, "batch") << " of the epoch; world size " << metaText(meta, "world_size") << ", batch size "
      << metaText(meta, "batch_size") << " per rank, seed " << metaText(meta, "seed") << "\n";
  out << "  model " << metaText(meta, "model") << ", dataset " << metaText(meta, "dataset") << ", optimizer "
      << metaText(meta, "optimizer") << "\n";
  if (meta.contains("model_config") && meta["model_config"].is_object()) {
    out << "  model config:";
    for (const auto& [key, value] : meta["model_config"].items()) {
      out << " " << key << "=" << (value.is_string() ? value.get<std::string>() : value.dump());
    }
    out << "\n";
    // The same in words: the real dimensions, and the context it was trained on.
    const nlohmann::json& c = meta["model_config"];
    const auto word = [&c](const char* key) {
      return c.contains(key) && c[key].is_string() ? c[key].get<std::string>() : std::string("?");
    };
    out << "  language model: " << word("name") << " (" << word("family") << "), " << word("layers") << " layers, dim "
        << word("dim") << ", " << word("heads") << " heads (" << word("kv_heads") << " key/value), vocab "
        << word("vocab_size") << "; trained on " << word("seq_len") << " tokens of context (of its "
        << word("max_seq_len") << " positions)\n";
  }
  if (meta.contains("lora") && meta["lora"].is_object()) {
    const nlohmann::json& lora = meta["lora"];
    const std::string base = lora.value("init_from", "");
    out << "  LoRA adapters: rank " << metaText(lora, "rank") << ", alpha " << metaText(lora, "alpha") << ", on "
        << metaText(lora, "targets") << "; base "
        << (base.empty() ? "the fresh weights of seed " + metaText(meta, "seed") : base)
        << " (not in the checkpoint)\n";
  }
  if (meta.contains("tokenizer") && meta["tokenizer"].is_object()) {
    out << "  tokenizer " << metaText(meta["tokenizer"], "kind") << "\n";
  }
  Group params, buffers, optimizer, other;
  for (const CheckpointTensorInfo& t : reader.tensors()) {
    Group& g = startsWith(t.name, kParam)       ? params
               : startsWith(t.name, kBuffer)    ? buffers
               : startsWith(t.name, kOptimizer) ? optimizer
                                                : other;
    g.add(t);
  }
  out << groupText("model parameters", params) << groupText("model buffers", buffers)
      << groupText("optimizer state", optimizer) << groupText("other (loss scaler, RNG)", other);
  if (!reader.aliases().empty()) out << "  aliases (tied weights): " << reader.aliases().size() << "\n";
  std::cout << out.str() << std::flush;
}

void printInfoJson(const CheckpointReader& reader) {
  nlohmann::json out;
  out["path"] = reader.path();
  out["bytes"] = checkpointBytes(reader);
  out["meta"] = reader.meta();
  nlohmann::json tensors = nlohmann::json::object();
  for (const CheckpointTensorInfo& t : reader.tensors()) {
    tensors[t.name] = {{"shape", t.shape}, {"dtype", std::string(c10::toString(t.dtype))}};
  }
  out["tensors"] = tensors;
  if (reader.sharded()) {
    nlohmann::json shards = nlohmann::json::array();
    const auto files = reader.files();
    for (size_t i = 0; i + 1 < files.size(); ++i) {
      shards.push_back({{"file", files[i].first.substr(files[i].first.rfind('/') + 1)}, {"bytes", files[i].second}});
    }
    out["sharded"] = {{"world_size", reader.worldSize()}, {"stage", reader.stage()}, {"shards", shards},
                      {"aliases", reader.aliases()}};
  }
  std::cout << out.dump() << std::endl;
}

// Written beside its destination, then renamed: never a half-written file.
void exportWeights(const CheckpointReader& reader, const std::string& out) {
  models::NamedTensors tensors;
  const std::vector<std::string> names = allNames(reader);
  for (const std::string& name : names) {
    if (startsWith(name, kParam)) tensors.emplace_back(name.substr(kParam.size()), reader.readTensor(name));
  }
  if (tensors.empty()) {
    throw ConfigError("checkpoint " + reader.path() + " holds no model parameters ('" + kParam +
                      "<name>'); expected a checkpoint of `dtrain train`");
  }
  for (const std::string& name : names) {
    if (startsWith(name, kBuffer)) tensors.emplace_back(name.substr(kBuffer.size()), reader.readTensor(name));
  }
  const nlohmann::json& meta = reader.meta();
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", metaText(meta, "step")},
                                                 {"model", metaText(meta, "model")}};
  if (meta.contains("model_config") && meta["model_config"].is_object()) {
    for (const auto& [key, value] : meta["model_config"].items()) {
      metadata[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
  }
  const std::string staging = out + ".partial";
  models::writeSafetensors(staging, tensors, metadata);
  if (std::rename(staging.c_str(), out.c_str()) != 0) {
    const int err = errno;
    std::remove(staging.c_str());
    throw errnoError("rename", err, "cannot move " + staging + " to " + out);
  }
  int64_t elements = 0;
  for (const auto& item : tensors) elements += item.second.numel();
  std::cerr << "dtrain checkpoint export: " << tensors.size() << " tensor(s), " << elements << " elements from "
            << reader.path() << " to " << out << " (" << fileBytes(out) << " bytes)" << std::endl;
}

// --merge-lora: the whole model a LoRA run's checkpoint stands for, as one
// safetensors file of dtrain's names (what exportWeights writes of a
// whole model's checkpoint) or a Hugging Face directory.
// --dtype: auto keeps `saved` (a float dtype; anything else exports as float32).
torch::ScalarType exportDtype(const std::string& dtype, torch::ScalarType saved) {
  if (dtype == "bf16") return torch::kBFloat16;
  if (dtype == "fp16") return torch::kHalf;
  if (dtype == "fp32") return torch::kFloat;
  return saved == torch::kBFloat16 || saved == torch::kHalf ? saved : torch::kFloat;
}

// config.json, the weights (sharded over --max-shard-size) and the
// tokenizer's files into `dir`; the line saying what the tokenizer got.
std::string writeHfDirectory(models::LanguageModel& model, const nlohmann::json& meta, const std::string& dir,
                             torch::ScalarType dtype, const CheckpointToolOptions& options) {
  const std::vector<std::string> files =
      models::exportHf(model, dir, dtype, parseByteSize(options.max_shard_size, "--max-shard-size"));
  std::string weights = files.size() == 2 ? files[0] : std::to_string(files.size() - 1) + " safetensors files";
  return weights + ", config.json; " + writeHfTokenizerFiles(meta, dir, model.config().max_seq_len);
}

void exportMerged(const CheckpointReader& reader, const CheckpointToolOptions& options) {
  const std::string& out = options.out;
  const std::shared_ptr<models::LanguageModel> model = mergedLoraModel(reader);
  const std::string staging = out + ".partial";
  std::filesystem::remove_all(staging);
  std::string tokenizer;
  if (options.format == "hf") {
    tokenizer = writeHfDirectory(*model, reader.meta(), staging, exportDtype(options.dtype, torch::kFloat), options);
  } else {
    models::NamedTensors tensors;
    for (const auto& item : model->named_parameters(/*recurse=*/true)) tensors.emplace_back(item.key(), item.value());
    std::map<std::string, std::string> metadata = models::languageModelMetadata(model->config());
    metadata.insert({{"format", "pt"},
                     {"step", metaText(reader.meta(), "step")},
                     {"model", metaText(reader.meta(), "model")}});
    models::writeSafetensors(staging, tensors, metadata);
  }
  std::filesystem::remove_all(out);
  std::filesystem::rename(staging, out);
  const std::string base = reader.meta().at("lora").value("init_from", "");
  std::cerr << "dtrain checkpoint export: the LoRA adapters of " << reader.path() << " merged into their base ("
            << (base.empty() ? "the fresh weights of seed " + metaText(reader.meta(), "seed") : base) << "), "
            << model->named_parameters().size() << " parameters to " << out
            << (tokenizer.empty() ? "" : "; " + tokenizer) << std::endl;
}

// A Hugging Face directory: the checkpoint's language model rebuilt from
// its meta, its parameters read in, written as transformers lays them out.
void exportHfDirectory(const CheckpointReader& reader, const CheckpointToolOptions& options) {
  const std::string& out = options.out;
  const nlohmann::json& meta = reader.meta();
  if (!meta.contains("model_config") || !meta["model_config"].is_object()) {
    throw ConfigError("checkpoint " + reader.path() + " holds no language-model config (meta \"model_config\"); "
                      "--format hf exports gpt2 and llama models");
  }
  std::map<std::string, std::string> config;
  for (const auto& [key, value] : meta["model_config"].items()) {
    config[key] = value.is_string() ? value.get<std::string>() : value.dump();
  }
  const models::LanguageModelConfig c = models::languageModelFromMetadata(config);
  const auto model = models::createLanguageModel(c);
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters(/*recurse=*/true)) {
    item.value().copy_(reader.readTensor(kParam + item.key()));
  }
  const std::string staging = out + ".partial";
  std::filesystem::remove_all(staging);
  const CheckpointTensorInfo* first = reader.find(kParam + model->named_parameters().begin()->key());
  const torch::ScalarType dtype = exportDtype(options.dtype, first != nullptr ? first->dtype : torch::kFloat);
  const std::string tokenizer = writeHfDirectory(*model, meta, staging, dtype, options);
  std::filesystem::remove_all(out);
  std::filesystem::rename(staging, out);
  std::cerr << "dtrain checkpoint export: " << model->named_parameters().size() << " parameters of a "
            << models::lmFamilyName(c.family) << " model from " << reader.path() << " to " << out << " ("
            << c10::toString(dtype) << "); " << tokenizer << std::endl;
}

// One file with every tensor whole, read and written one at a time.
void consolidate(const CheckpointReader& reader, const std::string& out) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<TensorToWrite> tensors;
  for (const std::string& name : allNames(reader)) {
    const CheckpointTensorInfo& t = *reader.find(name);
    tensors.push_back({name, t.dtype, t.shape, [&reader, name] { return reader.readTensor(name); }});
  }
  const WrittenFile written = writeCheckpointFile(out, reader.meta(), tensors);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "dtrain checkpoint consolidate: " << tensors.size() << " tensor(s) from " << reader.path() << " ("
            << reader.files().size() << " file(s)) to " << out << ": " << written.bytes << " bytes in " << seconds << " s"
            << std::endl;
}

// The file that holds the checkpoint's meta.
std::string metaFileOf(const CheckpointReader& reader) {
  return reader.sharded() ? reader.path() + "/" + kShardedMetadataFile : reader.path();
}

// Verified, and its meta checked: the tools print and copy it, `dtrain
// generate` rebuilds the model from it.
std::unique_ptr<CheckpointReader> openChecked(const std::string& path) {
  auto reader = std::make_unique<CheckpointReader>(path);
  reader->verify();
  checkTrainCheckpointMeta(metaFileOf(*reader), reader->meta(), MetaFields::kPresentOnes);
  return reader;
}

}  // namespace

std::unique_ptr<CheckpointReader> openNamedCheckpoint(const std::string& path, const std::string& what) {
  if (!isDirectory(path) || isShardedCheckpointDir(path)) return openChecked(path);
  std::vector<int64_t> rejected;
  while (const std::optional<std::string> found = newestCompleteCheckpoint(path, "ckpt", rejected)) {
    try {
      return openChecked(*found);
    } catch (const Error& e) {
      DTRAIN_LOG_WARN("skipping an invalid checkpoint: " << e.message());
      rejected.push_back(checkpointStepOf(found->substr(found->rfind('/') + 1), "ckpt"));
    }
  }
  throw ConfigError(what + " " + path +
                    ": no valid checkpoint (ckpt-*.dtck or a complete ckpt-*/) in this directory; expected the "
                    "--checkpoint-dir of `dtrain train` or a checkpoint");
}

std::pair<std::string, CheckpointState> loadNamedModel(const std::string& path, const std::string& what) {
  const std::unique_ptr<CheckpointReader> reader = openNamedCheckpoint(path, what);
  CheckpointState state;
  state.meta = reader->meta();
  for (const std::string& name : allNames(*reader)) {
    if (startsWith(name, "model.")) state.tensors[name] = reader->readTensor(name);
  }
  return {reader->path(), std::move(state)};
}

int runCheckpointTool(const CheckpointToolOptions& options) {
  checkCheckpointToolOptions(options);
  const std::unique_ptr<CheckpointReader> reader = openNamedCheckpoint(options.checkpoint, "CHECKPOINT");
  if (options.action == CheckpointAction::kExport) {
    if (options.merge_lora || (holdsLoraAdapters(*reader) && options.format == "hf")) {
      if (!options.merge_lora) {
        throw ConfigError("checkpoint " + reader->path() + " holds a LoRA run's adapters, not a whole model; "
                          "--format hf exports one with --merge-lora");
      }
      exportMerged(*reader, options);
    } else if (options.format == "hf") {
      exportHfDirectory(*reader, options);
    } else {
      exportWeights(*reader, options.out);
    }
  } else if (options.action == CheckpointAction::kConsolidate) {
    consolidate(*reader, options.out);
  } else if (options.json) {
    printInfoJson(*reader);
  } else {
    printInfo(*reader);
  }
  return 0;
}

}  // namespace dtrain

extern "C" int dtrain_run_checkpoint(const dtrain::CheckpointToolOptions* options) {
  return dtrain::runCheckpointTool(*options);
}
