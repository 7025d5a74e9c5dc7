// What `dtrain train --resume` and the checkpoint tools make of a checkpoint
// whose files are intact (their CRCs hold) but whose content cannot be
// trusted: meta fields of the wrong type or out of range, a checkpoint of
// another model or optimizer, NaN/Inf weights or optimizer state, an RNG
// state libtorch refuses, a negative step count; and of a damaged shard. A
// one-rank job (an in-memory group) writes a real checkpoint of a tiny MLP,
// which the test then rewrites with the format's own writers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "dtrain/checkpoint.h"
#include "models/model.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"
#include "checkpoint/checkpoint_file_writer.h"
#include "checkpoint/checkpoint_sharded.h"
#include "checkpoint/checkpoint_tools.h"
#include "train/job_checkpoint.h"
#include "train/training_job.h"

namespace dtrain {
namespace {

using testing::contains;
using testing::TempDir;

// A one-rank training job of an MLP with a few hundred parameters.
struct TinyJob {
  explicit TinyJob(std::vector<int64_t> hidden = {8}, OptimizerKind optimizer_kind = OptimizerKind::kSgd) {
    parallel.backend = CommBackend::kGloo;
    optimizer.kind = optimizer_kind;
    const JobParts parts{parallel, execution, optimizer, false, 5, {}, {}};
    models::ModelOptions model;
    model.in_channels = 1;
    model.num_classes = 3;
    model.image_size = 4;
    model.mlp_hidden = std::move(hidden);
    job = std::make_unique<TrainingJob>(parts, [model] { return models::createModel("mlp", model); });
  }

  JobCheckpoint checkpoint(const std::string& dir, const std::string& resume = "", bool allow_nonfinite = false) {
    CheckpointOptions options;
    options.dir = dir;
    options.resume = resume;
    options.allow_nonfinite = allow_nonfinite;
    return JobCheckpoint(*job, options, CheckpointIdentity{"mlp", "synthetic", 4, 5, {}, {}, {}, {}});
  }

  // Saves the job's state as the checkpoint of `step` in `dir`; its path.
  std::string save(const std::string& dir, int64_t step) {
    checkpoint(dir).save({1, 2, step});
    char name[32];
    std::snprintf(name, sizeof(name), "/ckpt-%09lld", static_cast<long long>(step));
    return dir + name;
  }

  // The message of the ConfigError resuming from `resume` throws ("" when none).
  std::string resumeError(const std::string& resume, const std::string& dir = "") {
    try {
      checkpoint(dir, resume).resume();
    } catch (const ConfigError& e) {
      return e.message();
    }
    return "";
  }

  // The name of the first trained parameter.
  std::string firstParameterName() {
    const torch::Tensor& p = job->dataParallel().parameters()[0];
    for (const auto& item : job->dataParallel().module()->named_parameters()) {
      if (item.value().unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) return item.key();
    }
    return "";
  }

  ParallelOptions parallel;
  ExecutionOptions execution;
  OptimizerOptions optimizer;
  std::unique_ptr<TrainingJob> job;
};

void editMeta(const std::string& ckpt, const std::function<void(nlohmann::json&)>& edit) {
  ShardedMetadata md = readShardedMetadata(ckpt);
  edit(md.meta);
  writeShardedMetadata(ckpt, md);
}

// Rewrites tensor `name` of the one-rank checkpoint's shard, and the
// metadata's record of the shard's size and CRC: intact files, new content.
void editShardTensor(const std::string& ckpt, const std::string& name,
                     const std::function<torch::Tensor(const torch::Tensor&)>& edit) {
  const std::string shard = ckpt + "/" + shardFileName(0, 1);
  nlohmann::json meta;
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  {
    const CheckpointFile file(shard);
    meta = file.meta();
    tensors = readAllTensors(file);
  }
  std::vector<TensorToWrite> out;
  bool found = false;
  for (auto& [key, tensor] : tensors) {
    if (key == name) {
      tensor = edit(tensor);
      found = true;
    }
    const torch::Tensor value = tensor;
    out.push_back({key, value.scalar_type(), value.sizes().vec(), [value] { return value; }});
  }
  ASSERT_TRUE(found) << name << " is not in " << shard;
  const WrittenFile written = writeCheckpointFile(shard, meta, out);
  ShardedMetadata md = readShardedMetadata(ckpt);
  md.shards[0].bytes = written.bytes;
  md.shards[0].crc = written.crc;
  writeShardedMetadata(ckpt, md);
}

TEST(CheckpointChecksTest, MetaFieldsOfTheWrongTypeOrRangeNameTheFileAndTheField) {
  TempDir dir("dtrain-ckpt-checks-meta");
  TinyJob tiny;
  const std::string ckpt = tiny.save(dir.path(), 7);
  const ShardedMetadata original = readShardedMetadata(ckpt);
  const std::string where = "checkpoint " + ckpt + "/metadata.dtck: field ";
  const struct {
    std::string field;
    nlohmann::json value;  // null: removed
    std::string expected;
  } cases[] = {
      {"step", "abc", "'step': expected a non-negative integer (at most 1099511627776), got \"abc\""},
      {"step", 1e300, "'step': expected a non-negative integer (at most 1099511627776), got 1e+300"},
      {"step", 4.5, "'step': expected a non-negative integer (at most 1099511627776), got 4.5"},
      {"step", nullptr, "'step' is missing; expected a non-negative integer (at most 1099511627776)"},
      {"epoch", -5, "'epoch': expected a non-negative integer (at most 1000000), got -5"},
      {"batch", "2", "'batch': expected a non-negative integer (at most 1099511627776), got \"2\""},
      {"batch_size", -1, "'batch_size': expected a positive integer (at most 1048576), got -1"},
      {"batch_size", int64_t{1} << 40, "'batch_size': expected a positive integer (at most 1048576), got 1099511627776"},
      {"world_size", 0, "'world_size': expected a positive integer (at most 16777216), got 0"},
      {"model", 5, "'model': expected a non-empty string, got 5"},
      {"seed", -3, "'seed': expected a non-negative integer, got -3"},
      {"tensor_layout", "slabs", "'tensor_layout': expected \"parameters\", got \"slabs\""},
      {"model_config", {{"layers", 2}}, "'model_config.layers': expected a string, got 2"},
      {"tokenizer", "byte", "'tokenizer': expected an object with a string \"kind\" and \"path\", got \"byte\""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.field + " = " + c.value.dump());
    editMeta(ckpt, [&](nlohmann::json& meta) {
      meta = original.meta;
      if (c.value.is_null()) {
        meta.erase(c.field);
      } else {
        meta[c.field] = c.value;
      }
    });
    EXPECT_EQ(tiny.resumeError(ckpt), where + c.expected);
  }
  editMeta(ckpt, [](nlohmann::json& meta) { meta = nlohmann::json::array({1, 2}); });
  EXPECT_EQ(tiny.resumeError(ckpt), "checkpoint " + ckpt + "/metadata.dtck: its meta is [1,2], expected a JSON object");

  // A single file (`dtrain checkpoint consolidate`'s) is named itself.
  CheckpointState whole = loadCheckpoint(ckpt);
  whole.meta = original.meta;
  whole.meta["epoch"] = -5;
  const std::string file = Checkpointer({.dir = dir / "single"}).save(7, whole);
  EXPECT_EQ(tiny.resumeError(file),
            "checkpoint " + file + ": field 'epoch': expected a non-negative integer (at most 1000000), got -5");
}

TEST(CheckpointChecksTest, AutoResumeSkipsACheckpointWithBadMetaForTheNextOlderOne) {
  TempDir dir("dtrain-ckpt-checks-auto");
  TinyJob tiny;
  tiny.save(dir.path(), 2);
  const std::string newest = tiny.save(dir.path(), 4);
  editMeta(newest, [](nlohmann::json& meta) { meta["step"] = "abc"; });
  const TrainPosition at = tiny.checkpoint(dir.path(), "auto").resume();
  EXPECT_EQ(at.step, 2);
  EXPECT_EQ(at.epoch, 1);
  EXPECT_EQ(at.batch, 2);
}

TEST(CheckpointChecksTest, ACheckpointOfAnotherModelOrOptimizerIsAClearError) {
  TempDir dir("dtrain-ckpt-checks-other");
  TinyJob tiny;
  const std::string ckpt = tiny.save(dir.path(), 3);
  editMeta(ckpt, [](nlohmann::json& meta) { meta["model"] = "cnn"; });
  EXPECT_EQ(tiny.resumeError(ckpt), "checkpoint " + ckpt + "/metadata.dtck: field 'model': the checkpoint is of "
                                    "'cnn', this job trains 'mlp' (--model)");
  editMeta(ckpt, [](nlohmann::json& meta) { meta["model"] = "mlp"; });
  TinyJob adamw({8}, OptimizerKind::kAdamW);
  EXPECT_EQ(adamw.resumeError(ckpt), "checkpoint " + ckpt + "/metadata.dtck: field 'optimizer': the checkpoint holds "
                                     "the state of 'sgd', this job runs 'adamw' (--optimizer)");
  // Same names, other shapes: the tensor and both shapes, as before.
  TinyJob wider({6});
  const std::string error = wider.resumeError(ckpt);
  EXPECT_TRUE(contains(error, "checkpoint " + ckpt + ": 'model.param.")) << error;
  EXPECT_TRUE(contains(error, "[8] Float, but this model has [6] Float (a different --model or data set?)")) << error;
  // The run's world size and batch size may differ: the checkpoint reshards.
  editMeta(ckpt, [](nlohmann::json& meta) {
    meta["world_size"] = 3;
    meta["batch_size"] = 2;
  });
  EXPECT_EQ(tiny.checkpoint("", ckpt).resume().step, 3);
}

TEST(CheckpointChecksTest, NonFiniteWeightsAndOptimizerStateAreRefusedUnlessAllowed) {
  TempDir dir("dtrain-ckpt-checks-nan");
  std::string ckpt, name;
  {
    TinyJob diverged;
    torch::NoGradGuard no_grad;
    const torch::Tensor p = diverged.job->dataParallel().parameters()[0].view({-1});
    p[0].fill_(std::nan(""));
    p[1].fill_(INFINITY);
    p[2].fill_(-INFINITY);
    name = diverged.firstParameterName();
    ckpt = diverged.save(dir.path(), 5);
  }
  TinyJob tiny;
  EXPECT_EQ(tiny.resumeError(ckpt), "checkpoint " + ckpt + ": tensor 'model.param." + name +
                                        "' has 3 non-finite value(s) (NaN/Inf); pass --allow-nonfinite-checkpoint "
                                        "to resume anyway");
  EXPECT_EQ(tiny.checkpoint("", ckpt, /*allow_nonfinite=*/true).resume().step, 5);
  EXPECT_TRUE(std::isnan(tiny.job->dataParallel().parameters()[0].view({-1})[0].item<float>()));

  TempDir dir2("dtrain-ckpt-checks-nan-optimizer");
  TinyJob momentum;
  {
    torch::NoGradGuard no_grad;
    const auto state = momentum.job->optimizer().localState();
    ASSERT_FALSE(state.empty());
    state[0].tensor.fill_(std::nan(""));
  }
  ckpt = momentum.save(dir2.path(), 6);
  const std::string error = TinyJob().resumeError(ckpt);
  // Every parameter's run of the slab: the first by name, and how many others.
  EXPECT_TRUE(contains(error, "checkpoint " + ckpt + ": tensor 'optimizer.sgd.momentum.")) << error;
  EXPECT_TRUE(contains(error, " non-finite value(s) (NaN/Inf), and 3 other tensor(s) have some; pass "
                              "--allow-nonfinite-checkpoint to resume anyway"))
      << error;
}

TEST(CheckpointChecksTest, AnRngStateLibtorchRefusesIsAnErrorNamingTheTensor) {
  TempDir dir("dtrain-ckpt-checks-rng");
  TinyJob tiny;
  // The right size, but no generator state: libtorch's "Invalid mt19937 state".
  const std::string ckpt = tiny.save(dir.path(), 2);
  editShardTensor(ckpt, "rng.cpu", [](const torch::Tensor& t) { return torch::zeros_like(t); });
  std::string error = tiny.resumeError(ckpt);
  EXPECT_TRUE(contains(error, "checkpoint " + ckpt + ": tensor 'rng.cpu' does not load: ")) << error;
  EXPECT_FALSE(contains(error, "Exception raised from")) << error;

  // The single-file layout of older dtrains, with a state of another size.
  CheckpointState old;
  for (const auto& item : tiny.job->dataParallel().module()->named_parameters()) {
    old.tensors["model.param." + item.key()] = item.value().detach().clone();
  }
  for (const auto& [key, tensor] : tiny.job->optimizer().stateDict()) old.tensors["optimizer." + key] = tensor;
  old.tensors["rng.cpu"] = torch::zeros({16}, torch::kUInt8);
  old.meta = {{"step", 2},      {"epoch", 0},   {"batch", 2},          {"world_size", 1}, {"batch_size", 4},
              {"model", "mlp"}, {"seed", 5},    {"dataset", "synthetic"}, {"optimizer", "sgd"}};
  const std::string file = Checkpointer({.dir = dir / "old"}).save(2, old);
  error = tiny.resumeError(file);
  EXPECT_TRUE(contains(error, "checkpoint " + file + ": tensor 'rng.cpu' does not load: ")) << error;
  EXPECT_FALSE(contains(error, "Exception raised from")) << error;
}

TEST(CheckpointChecksTest, ANegativeOptimizerStepCountIsAnError) {
  TempDir dir("dtrain-ckpt-checks-step");
  TinyJob tiny;
  const std::string ckpt = tiny.save(dir.path(), 2);
  editShardTensor(ckpt, "optimizer.sgd.step", [](const torch::Tensor& t) { return torch::full_like(t, -5); });
  EXPECT_EQ(tiny.resumeError(ckpt),
            "checkpoint " + ckpt + ": tensor 'optimizer.sgd.step' is -5, expected a non-negative step count");
}

TEST(CheckpointChecksTest, DamagedOrTruncatedShardsAreErrorsNamingTheFile) {
  TempDir dir("dtrain-ckpt-checks-damaged");
  TinyJob tiny;
  std::string ckpt = tiny.save(dir.path(), 2);
  ASSERT_EQ(::truncate((ckpt + "/" + shardFileName(0, 1)).c_str(), 200), 0);
  std::string error = tiny.resumeError(ckpt);
  EXPECT_TRUE(contains(error, "checkpoint " + ckpt + " is damaged: rank-00000-of-00001.dtck has 200 bytes, "
                              "expected "))
      << error;
  ckpt = tiny.save(dir.path(), 3);
  const std::string shard = ckpt + "/" + shardFileName(0, 1);
  {
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-100, std::ios::end);
    file.put('\x5a');
  }
  error = tiny.resumeError(ckpt);
  EXPECT_TRUE(contains(error, shard)) << error;
  EXPECT_TRUE(contains(error, "checksum mismatch")) << error;
}

TEST(CheckpointChecksTest, TheToolsRefuseBadMetaAndSkipItInACheckpointDirectory) {
  TempDir dir("dtrain-ckpt-checks-tools");
  TinyJob tiny;
  tiny.save(dir.path(), 2);
  const std::string newest = tiny.save(dir.path(), 4);
  editMeta(newest, [](nlohmann::json& meta) { meta["epoch"] = -5; });
  try {
    openNamedCheckpoint(newest, "CHECKPOINT");
    ADD_FAILURE() << "no error for a meta with epoch -5";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.message(), "checkpoint " + newest +
                               "/metadata.dtck: field 'epoch': expected a non-negative integer (at most 1000000), "
                               "got -5");
  }
  EXPECT_EQ(openNamedCheckpoint(dir.path(), "CHECKPOINT")->meta()["step"], 2);
}

}  // namespace
}  // namespace dtrain
