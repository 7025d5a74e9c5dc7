#include "train/checkpoint_tools.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/error.h"
#include "models/safetensors.h"

namespace dtrain {
namespace {

const std::string kParam = "model.param.", kBuffer = "model.buffer.", kOptimizer = "optimizer.";

bool startsWith(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

// stat(2), not std::filesystem: PyTorch's 2.x wheels export their own copy
// of it from libtorch.so (see checkpoint.cc).
bool isDirectory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

int64_t fileBytes(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 ? static_cast<int64_t>(info.st_size) : -1;
}

std::string shapeText(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

std::string metaText(const nlohmann::json& meta, const char* key) {
  const auto it = meta.find(key);
  if (it == meta.end()) return "-";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

struct Group {
  int tensors = 0;
  int64_t elements = 0;
  int64_t bytes = 0;
  void add(const torch::Tensor& t) {
    ++tensors;
    elements += t.numel();
    bytes += t.numel() * static_cast<int64_t>(t.element_size());
  }
};

std::string groupText(const char* name, const Group& g) {
  std::ostringstream out;
  out << "  " << name << ": " << g.tensors << " tensor(s), " << g.elements << " elements, " << g.bytes
      << " bytes\n";
  return out.str();
}

void printInfo(const std::string& path, const CheckpointState& state) {
  const nlohmann::json& meta = state.meta;
  std::ostringstream out;
  out << "checkpoint " << path << " (" << fileBytes(path) << " bytes)\n";
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
  }
  if (meta.contains("tokenizer") && meta["tokenizer"].is_object()) {
    out << "  tokenizer " << metaText(meta["tokenizer"], "kind") << "\n";
  }
  Group params, buffers, optimizer, other;
  for (const auto& [key, tensor] : state.tensors) {
    Group& g = startsWith(key, kParam)       ? params
               : startsWith(key, kBuffer)    ? buffers
               : startsWith(key, kOptimizer) ? optimizer
                                             : other;
    g.add(tensor);
  }
  out << groupText("model parameters", params) << groupText("model buffers", buffers)
      << groupText("optimizer state", optimizer) << groupText("other (loss scaler, RNG)", other);
  std::cout << out.str() << std::flush;
}

void printInfoJson(const std::string& path, const CheckpointState& state) {
  nlohmann::json out;
  out["path"] = path;
  out["bytes"] = fileBytes(path);
  out["meta"] = state.meta;
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [key, tensor] : state.tensors) {
    tensors[key] = {{"shape", tensor.sizes().vec()}, {"dtype", std::string(c10::toString(tensor.scalar_type()))}};
  }
  out["tensors"] = tensors;
  std::cout << out.dump() << std::endl;
}

void exportWeights(const std::string& path, const CheckpointState& state, const std::string& out) {
  models::NamedTensors tensors;
  for (const auto& [key, tensor] : state.tensors) {
    if (startsWith(key, kParam)) tensors.emplace_back(key.substr(kParam.size()), tensor);
  }
  if (tensors.empty()) {
    throw ConfigError("checkpoint " + path + " holds no model parameters ('" + kParam +
                      "<name>'); expected a checkpoint of `dtrain train`");
  }
  for (const auto& [key, tensor] : state.tensors) {
    if (startsWith(key, kBuffer)) tensors.emplace_back(key.substr(kBuffer.size()), tensor);
  }
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", metaText(state.meta, "step")},
                                                 {"model", metaText(state.meta, "model")}};
  if (state.meta.contains("model_config") && state.meta["model_config"].is_object()) {
    for (const auto& [key, value] : state.meta["model_config"].items()) {
      metadata[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
  }
  // Written beside its destination, then renamed: never a half-written file.
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
            << path << " to " << out << " (" << fileBytes(out) << " bytes)" << std::endl;
}

}  // namespace

std::pair<std::string, CheckpointState> loadNamedCheckpoint(const std::string& path, const std::string& what) {
  if (!isDirectory(path)) return {path, loadCheckpoint(path)};
  auto found = resolveResume("auto", path);
  if (!found) {
    throw ConfigError(what + " " + path +
                      ": no valid checkpoint (ckpt-*.dtck) in this directory; expected the --checkpoint-dir of "
                      "`dtrain train` or a checkpoint file");
  }
  return std::move(*found);
}

int runCheckpointTool(const CheckpointToolOptions& options) {
  checkCheckpointToolOptions(options);
  const auto [path, state] = loadNamedCheckpoint(options.checkpoint, "CHECKPOINT");
  if (options.action == "export") {
    exportWeights(path, state, options.out);
  } else if (options.json) {
    printInfoJson(path, state);
  } else {
    printInfo(path, state);
  }
  return 0;
}

}  // namespace dtrain

extern "C" int dtrain_run_checkpoint(const dtrain::CheckpointToolOptions* options) {
  return dtrain::runCheckpointTool(*options);
}
