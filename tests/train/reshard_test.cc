// Sharded checkpoints of `dtrain train`, end to end as real processes on
// Gloo:
// - resharding: a chain of runs, alternately on 2 and 3 ranks, each
//   loading the checkpoint the previous one wrote under another --shard
//   stage and writing it again before any step: every hop must write
//   exactly what it loaded (every tensor, bit for bit). The stages follow a
//   de Bruijn sequence, so each of the 16 (saved by, loaded by) pairs of
//   stages is crossed once, between 2 and 3 ranks;
// - the result's `dtrain checkpoint info|consolidate|export`, and the
//   consolidated file resuming;
// - a rank SIGKILLed while it writes its shard: the group skips the
//   half-written checkpoint with a warning naming the missing files,
//   resumes from the last complete one and ends bitwise equal to an
//   uninterrupted run;
// - a checkpoint of another model: exit 2 naming the tensor and both shapes;
// - a single file in the slab layout of dtrains before sharded checkpoints
//   (written here by the library, as they wrote it) resumes: its state,
//   saved again, is the same, each parameter's optimizer state found where
//   the slab held it.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "dtrain/checkpoint.h"
#include "dtrain/data_parallel.h"
#include "dtrain/optim.h"
#include "models/model.h"
#include "models/safetensors.h"
#include "store/hash_store.h"
#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"
#include "tests/train/train_runs.h"

namespace dtrain {
namespace {

using testing::contains;
using testing::dtrainBin;
using testing::freePort;
using testing::runCommand;
using testing::TempDir;
using testing::checkpointOf;

const std::string& kTinyGpt = testing::kTinyGptRun;
const std::string kAdamW = "--optimizer adamw --lr 3e-3 --beta2 0.95 --weight-decay 0.1 --warmup-steps 2 "
                           "--schedule constant --clip-grad-norm 0.5 ";

std::string launch(int ranks, const std::string& args, const std::string& launcher_args = "",
                   const std::string& model = kTinyGpt) {
  return testing::launchTrain(ranks, model + kAdamW + args, launcher_args);
}

// Every tensor of the two checkpoints (any layout), bit for bit.
void expectSameTensors(const std::string& a_path, const std::string& b_path, int min_parameters = 10) {
  const CheckpointState a = loadCheckpoint(a_path), b = loadCheckpoint(b_path);
  ASSERT_EQ(a.tensors.size(), b.tensors.size()) << a_path << " vs " << b_path;
  int optimizer = 0;
  for (const auto& [key, tensor] : a.tensors) {
    ASSERT_TRUE(b.tensors.count(key)) << key << " is missing from " << b_path;
    const torch::Tensor& other = b.tensors.at(key);
    EXPECT_TRUE(tensor.sizes() == other.sizes() && tensor.scalar_type() == other.scalar_type() &&
                torch::equal(tensor, other))
        << key << " differs between " << a_path << " and " << b_path;
    optimizer += key.rfind("optimizer.adamw.exp_avg.", 0) == 0 ? 1 : 0;
  }
  EXPECT_GE(optimizer, min_parameters) << a_path << " holds too few per-parameter optimizer tensors";
}

// Stage indices: each adjacent pair of this sequence is a different one of
// the 16 ordered pairs (a de Bruijn sequence of order 2 over 4 symbols).
// The chain starts from ZeRO-2, whose shards hold slices of buckets.
const std::vector<std::string> kStages = {"gradients", "optimizer", "none", "full"};
const int kChain[] = {0, 0, 1, 0, 2, 0, 3, 1, 1, 2, 1, 3, 2, 2, 3, 3, 0};

class ReshardTest : public ::testing::Test {
 protected:
  // The 2-rank checkpoint of step 4 the chain starts from, written once.
  static void SetUpTestSuite() {
    origin_ = new TempDir("dtrain-reshard-origin");
    const auto r = runCommand(launch(2, "--shard " + kStages[kChain[0]] + " --max-steps 4 --checkpoint-every 4 "
                                        "--checkpoint-dir " + origin_->path()),
                              300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete origin_;
    origin_ = nullptr;
  }
  static TempDir* origin_;
};
TempDir* ReshardTest::origin_ = nullptr;

TEST_F(ReshardTest, EveryStagePairLoadsWhatItSavedAcrossTwoAndThreeRanks) {
  ASSERT_EQ(CheckpointReader(checkpointOf(*origin_, 4)).stage(), "gradients");
  std::vector<std::unique_ptr<TempDir>> hops;
  std::string previous = checkpointOf(*origin_, 4);
  int ranks = 2;
  for (size_t i = 1; i < std::size(kChain); ++i) {
    ranks = 5 - ranks;
    const std::string& from = kStages[kChain[i - 1]];
    const std::string& to = kStages[kChain[i]];
    SCOPED_TRACE("hop " + std::to_string(i) + ": --shard " + from + " on " + std::to_string(5 - ranks) +
                 " rank(s) -> --shard " + to + " on " + std::to_string(ranks));
    hops.push_back(std::make_unique<TempDir>("dtrain-reshard-hop"));
    const auto r = runCommand(launch(ranks, "--shard " + to + " --max-steps 4 --resume " + previous +
                                                "/metadata.dtck --checkpoint-dir " + hops.back()->path()),
                              300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ASSERT_TRUE(contains(r.output, "resuming from " + previous)) << r.output;
    const std::string next = checkpointOf(*hops.back(), 4);
    ASSERT_TRUE(missingCheckpointParts(next).empty()) << next;
    const CheckpointReader reader(next);
    EXPECT_EQ(reader.worldSize(), ranks);
    EXPECT_EQ(reader.stage(), to);
    ASSERT_NO_FATAL_FAILURE(expectSameTensors(previous, next));
    previous = next;
    if (hops.size() > 2) hops.erase(hops.begin());  // keep the disk small
  }
}

TEST_F(ReshardTest, ToolsReadTheShardsAndTheConsolidatedFileResumes) {
  const std::string ckpt = checkpointOf(*origin_, 4);
  const auto info = runCommand(dtrainBin() + " checkpoint info " + origin_->path() + " 2>&1", 120);
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_TRUE(contains(info.output, "checkpoint " + ckpt + " (")) << info.output;
  EXPECT_TRUE(contains(info.output, "sharded: 2 shard(s) written with --shard gradients")) << info.output;
  EXPECT_TRUE(contains(info.output, "shard rank-00001-of-00002.dtck: ")) << info.output;
  EXPECT_TRUE(contains(info.output, "step 4, epoch")) << info.output;
  const auto json = runCommand(dtrainBin() + " checkpoint info " + ckpt + " --json 2>/dev/null", 120);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json doc = nlohmann::json::parse(json.output);
  EXPECT_EQ(doc["sharded"]["world_size"], 2);
  EXPECT_EQ(doc["sharded"]["shards"].size(), 2u);
  EXPECT_EQ(doc["tensors"]["model.param.transformer.wte.weight"]["shape"], nlohmann::json::array({320, 32}));
  EXPECT_EQ(doc["tensors"]["optimizer.adamw.exp_avg.transformer.wte.weight"]["shape"],
            nlohmann::json::array({320, 32}));

  TempDir out("dtrain-reshard-tools");
  const std::string whole = out / "whole.dtck";
  const auto consolidated = runCommand(dtrainBin() + " checkpoint consolidate " + ckpt + " --out " + whole + " 2>&1", 120);
  ASSERT_EQ(consolidated.exit_code, 0) << consolidated.output;
  ASSERT_NO_FATAL_FAILURE(expectSameTensors(ckpt, whole));

  const auto exported = runCommand(dtrainBin() + " checkpoint export " + ckpt + " --out " + (out / "m.safetensors") +
                                       " 2>&1", 120);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  const CheckpointState state = loadCheckpoint(whole);
  const models::SafetensorsContents weights = models::readSafetensors(out / "m.safetensors");
  EXPECT_GT(weights.tensors.size(), 10u);
  for (const auto& [name, tensor] : weights.tensors) {
    const auto found = state.tensors.find("model.param." + name);
    ASSERT_NE(found, state.tensors.end()) << name;
    EXPECT_TRUE(torch::equal(tensor, found->second)) << name;
  }

  // The consolidated file resumes, on 3 ZeRO-3 ranks, to the same state.
  TempDir again("dtrain-reshard-again");
  const auto r = runCommand(launch(3, "--shard full --max-steps 4 --resume " + whole + " --checkpoint-dir " +
                                          again.path()),
                            300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_NO_FATAL_FAILURE(expectSameTensors(whole, checkpointOf(again, 4)));
}

TEST_F(ReshardTest, CheckpointOfAnotherModelIsAClearError) {
  TempDir dir("dtrain-reshard-other");
  const std::string other = "--model gpt2 --layers 2 --dim 48 --heads 4 --seq-len 32 --vocab-size 320 "
                            "--dataset text --tokenizer byte --batch-size 4 --seed 5 --progress none ";
  const auto r = runCommand(launch(2, "--max-steps 4 --resume " + checkpointOf(*origin_, 4) + "/metadata.dtck "
                                      "--checkpoint-dir " + dir.path(), "", other),
                            300);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, checkpointOf(*origin_, 4))) << r.output;
  // The first tensor by name that differs.
  EXPECT_TRUE(contains(r.output, ": 'model.param.transformer.h.0.attn.c_attn.bias' has shape [96] Float, but this "
                                 "model has [144] Float (a different --model or data set?)"))
      << r.output;
}

// Killed while writing its shard of step 4 or not, the same ZeRO-3 job
// ends with the same bits; the half-written step 4 is skipped by name.
TEST(ShardedCheckpointCrashTest, RankKilledMidWriteResumesFromTheLastCompleteCheckpoint) {
  const std::string common = "--shard full --max-steps 6 --checkpoint-every 2 --resume auto ";
  TempDir clean("dtrain-ckpt-kill-clean"), killed("dtrain-ckpt-kill");
  const auto a = runCommand(launch(2, common + "--checkpoint-dir " + clean.path()), 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const auto b = runCommand("DTRAIN_FAULT_KILL_IN_CHECKPOINT=1:4 " +
                                launch(2, common + "--checkpoint-dir " + killed.path(), "--max-restarts 1"),
                            300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "rank 1 kills itself while writing its shard of step 4")) << b.output;
  EXPECT_TRUE(contains(b.output, "ckpt-000000004: metadata.dtck missing, rank-00001-of-00002.dtck missing; skipped"))
      << b.output;
  EXPECT_TRUE(contains(b.output, "resuming from " + checkpointOf(killed, 2))) << b.output;
  for (int step : {2, 4, 6}) EXPECT_TRUE(missingCheckpointParts(checkpointOf(killed, step)).empty()) << step;
  ASSERT_NO_FATAL_FAILURE(expectSameTensors(checkpointOf(clean, 6), checkpointOf(killed, 6)));
}

// Channels-last conv weights lie permuted in memory, so their runs are
// saved in that order (the metadata's storage_order): they load into
// row-major weights and back, to the same values.
TEST(ShardedCheckpointLayoutTest, ChannelsLastWeightsLoadIntoEitherLayout) {
  const std::string cnn = "--model cnn --dataset synthetic --synthetic-samples 256 --batch-size 8 --seed 5 "
                          "--progress none ";
  TempDir a("dtrain-ckpt-cl"), b("dtrain-ckpt-rowmajor"), c("dtrain-ckpt-cl-again");
  auto r = runCommand(launch(2, "--channels-last --shard optimizer --max-steps 2 --checkpoint-every 2 "
                                "--checkpoint-dir " + a.path(), "", cnn),
                      300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const CheckpointReader saved(checkpointOf(a, 2));
  ASSERT_NE(saved.find("model.param.features.0.weight"), nullptr);
  EXPECT_EQ(saved.find("model.param.features.0.weight")->storage_order, (std::vector<int64_t>{0, 2, 3, 1}));
  r = runCommand(launch(3, "--shard gradients --max-steps 2 --resume " + checkpointOf(a, 2) + "/metadata.dtck " +
                               "--checkpoint-dir " + b.path(), "", cnn),
                 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(CheckpointReader(checkpointOf(b, 2)).find("model.param.features.0.weight")->storage_order.empty());
  ASSERT_NO_FATAL_FAILURE(expectSameTensors(checkpointOf(a, 2), checkpointOf(b, 2), 4));
  r = runCommand(launch(2, "--channels-last --max-steps 2 --resume " + checkpointOf(b, 2) + "/metadata.dtck " +
                               "--checkpoint-dir " + c.path(), "", cnn),
                 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_NO_FATAL_FAILURE(expectSameTensors(checkpointOf(b, 2), checkpointOf(c, 2), 4));
}

// A checkpoint as dtrains before sharded checkpoints wrote one (their
// JobCheckpoint::pack): the tiny gpt2 in DataParallel's slabs (decayed
// and not), AdamW state per slab in the unsharded layout after two steps
// of made-up gradients, at step 2.
std::string writeSlabLayoutCheckpoint(const std::string& dir) {
  models::ModelOptions o;
  o.language_model.layers = 2;
  o.language_model.dim = 32;
  o.language_model.heads = 4;
  o.language_model.seq_len = 32;
  o.language_model.vocab_size = 320;
  torch::manual_seed(11);
  const std::shared_ptr<models::Model> model = models::createModel("gpt2", o);
  DataParallelOptions options;
  options.no_weight_decay = model->noWeightDecayParameters();
  DataParallel dp(model, createCommunicator("gloo", std::make_shared<HashStore>(), 0, 1), options);
  const auto optimizer = makeAdamW(dp.slabs(), {.lr = 3e-3, .beta2 = 0.95, .weight_decay = 0.1});
  for (int step = 0; step < 2; ++step) {
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& p : dp.parameters()) p.mutable_grad().copy_(torch::randn_like(p));  // gaps stay 0
    optimizer->step();
  }
  CheckpointState state;
  for (const auto& item : model->named_parameters()) state.tensors["model.param." + item.key()] = item.value();
  for (const auto& item : model->named_buffers()) state.tensors["model.buffer." + item.key()] = item.value();
  for (const auto& [key, tensor] : optimizer->stateDict()) state.tensors["optimizer." + key] = tensor;
  state.meta = {{"step", 2},         {"epoch", 0},  {"batch", 2},        {"world_size", 1},
                {"batch_size", 4},   {"model", "gpt2"}, {"dataset", "text"}, {"optimizer", "adamw"},
                {"seed", 5}};
  EXPECT_GE(dp.slabs().size(), 2u);  // the test needs more than one slab
  return Checkpointer({.dir = dir}).save(2, state);
}

// Where `run` lies in `slab`, found by value (state after random steps
// matches at one place only); -1 when nowhere.
int64_t findRun(const torch::Tensor& slab, const torch::Tensor& run) {
  const torch::Tensor starts = torch::nonzero(slab == run[0]).reshape({-1});
  for (int64_t i = 0; i < starts.numel(); ++i) {
    const int64_t at = starts[i].item<int64_t>();
    if (at + run.numel() <= slab.numel() && torch::equal(slab.narrow(0, at, run.numel()), run)) return at;
  }
  return -1;
}

TEST(LegacyCheckpointTest, SlabLayoutFileOfOlderDtrainsResumesWithItsState) {
  TempDir dir("dtrain-ckpt-legacy");
  const std::string legacy = writeSlabLayoutCheckpoint(dir / "old");
  const auto r = runCommand(launch(2, "--shard gradients --max-steps 2 --resume " + legacy + " --checkpoint-dir " +
                                          (dir / "new")),
                            300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const CheckpointState old = loadCheckpoint(legacy), resaved = loadCheckpoint(dir / "new/ckpt-000000002");
  EXPECT_TRUE(torch::equal(old.tensors.at("optimizer.adamw.step"), resaved.tensors.at("optimizer.adamw.step")));
  int params = 0;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> placed;  // slab key -> runs found
  for (const auto& [key, value] : old.tensors) {
    if (key.rfind("model.param.", 0) != 0) continue;
    ++params;
    ASSERT_TRUE(torch::equal(value, resaved.tensors.at(key))) << key;
    const std::string name = key.substr(std::string("model.param.").size());
    for (const std::string state : {"exp_avg", "exp_avg_sq"}) {
      const torch::Tensor run = resaved.tensors.at("optimizer.adamw." + state + "." + name).reshape({-1});
      int64_t at = -1;
      std::string found_in;
      for (const auto& [slab_key, slab] : old.tensors) {
        if (slab_key.rfind("optimizer.adamw." + state + ".", 0) == 0 && at < 0 &&
            std::count(slab_key.begin(), slab_key.end(), '.') == 3) {
          at = findRun(slab, run);
          found_in = slab_key;
        }
      }
      ASSERT_GE(at, 0) << state << " of " << name << " is nowhere in the old slabs";
      placed[found_in].emplace_back(at, at + run.numel());
    }
  }
  EXPECT_GT(params, 10);
  // The runs found are disjoint and everything else in the slabs is zero
  // (alignment gaps): each parameter's state came from its own place.
  for (auto& [slab_key, runs] : placed) {
    std::sort(runs.begin(), runs.end());
    torch::Tensor rest = old.tensors.at(slab_key).clone();
    for (size_t i = 0; i < runs.size(); ++i) {
      if (i > 0) {
        EXPECT_LE(runs[i - 1].second, runs[i].first) << slab_key << ": two parameters at one place";
      }
      rest.narrow(0, runs[i].first, runs[i].second - runs[i].first).zero_();
    }
    EXPECT_EQ(rest.abs().max().item<double>(), 0.0) << slab_key << " holds state no parameter took";
  }
}

}  // namespace
}  // namespace dtrain
