// `dtrain train --init-from` under --shard full and --tp on 2 ranks as real
// processes on Gloo: each rank reads from the memory-mapped files only the
// elements it holds (its ZeRO-3 slices, its tensor-parallel parts), says so
// on its load line, and the model it starts from is the one the files
// hold, bit for bit, as the whole load (2 replicated ranks) starts from.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/checkpoint_view.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"
#include "tests/train/train_runs.h"

namespace dtrain {
namespace {
using testing::CheckpointView;
using testing::contains;
using testing::dtrainBin;
using testing::readCheckpoint;
using testing::runCommand;
using testing::TempDir;

const std::string kTinyLlama = "--model llama --layers 2 --dim 32 --heads 4 --kv-heads 2 --seq-len 32 "
                               "--vocab-size 320 ";
const std::string kRun = "--dataset text --tokenizer byte --batch-size 4 --seed 5 --progress none --eval-batches 2 ";

struct Share {
  int64_t read = -1, total = -1;
};

// "rank R's share: X of Y bytes" of the load line.
Share shareOf(const std::string& output, int rank) {
  const std::string key = "rank " + std::to_string(rank) + "'s share: ";
  const size_t at = output.find(key);
  if (at == std::string::npos) return {};
  const size_t from = at + key.size(), of = output.find(" of ", from), end = output.find(" bytes", of);
  if (of == std::string::npos || end == std::string::npos) return {};
  return {std::stoll(output.substr(from, of - from)), std::stoll(output.substr(of + 4, end - of - 4))};
}

double firstLoss(const std::string& jsonl) {
  std::ifstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record["event"] == "step") return record["loss"].get<double>();
  }
  return -1;
}

// Every model.param tensor of `loaded` is the source checkpoint's, bit for bit.
void expectSameParameters(const CheckpointView& source, const std::string& loaded_path) {
  const CheckpointView loaded = readCheckpoint(loaded_path);
  int compared = 0;
  for (const auto& [key, tensor] : source.tensors) {
    if (key.rfind("model.param.", 0) != 0) continue;
    ASSERT_TRUE(loaded.tensors.count(key)) << key << " is missing from " << loaded_path;
    EXPECT_TRUE(tensor == loaded.tensors.at(key)) << key << " differs in " << loaded_path;
    ++compared;
  }
  EXPECT_GT(compared, 10);
}

TEST(InitFromShareTest, EachRankReadsItsShareUnderShardFullAndTpAndStartsFromTheSameModel) {
  TempDir dir("dtrain-init-share");
  const std::string source = dir / "source", hf = dir / "hf";
  auto r = runCommand(testing::launchTrain(1, kTinyLlama + kRun + "--max-steps 2 --checkpoint-dir " + source), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = runCommand(dtrainBin() + " checkpoint export " + source + " --format hf --out " + hf + " 2>&1", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const CheckpointView trained = readCheckpoint(dir / "source/ckpt-000000002");

  // lr 0: the step leaves the parameters as loaded, and the checkpoint shows them.
  const auto run = [&](const std::string& name, const std::string& flags) {
    const std::string args = "--init-from " + hf + " --seq-len 32 " + kRun + flags +
                             " --lr 0 --max-steps 1 --checkpoint-every 1 --log-every 1 --checkpoint-dir " +
                             (dir / name) + " --metrics-jsonl " + (dir / (name + ".jsonl"));
    return runCommand(testing::launchTrain(2, args), 180);
  };
  const auto whole = run("whole", "--shard none");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_TRUE(contains(whole.output, "--init-from " + hf + ": ")) << whole.output;
  EXPECT_FALSE(contains(whole.output, "'s share: ")) << whole.output;  // every rank reads every tensor
  expectSameParameters(trained, (dir / "whole/ckpt-000000001"));

  const auto full = run("full", "--shard full");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const Share f0 = shareOf(full.output, 0), f1 = shareOf(full.output, 1);
  std::printf("--shard full: rank 0 read %lld, rank 1 %lld of %lld bytes\n", static_cast<long long>(f0.read),
              static_cast<long long>(f1.read), static_cast<long long>(f0.total));
  ASSERT_GT(f0.total, 0) << full.output;
  EXPECT_EQ(f0.total, f1.total);
  for (const Share& s : {f0, f1}) {
    EXPECT_GT(s.read, f0.total * 0.45) << full.output;
    EXPECT_LT(s.read, f0.total * 0.55) << full.output;
  }
  // Every element once (q and k rows whole where a slice cuts one: a few more).
  EXPECT_GE(f0.read + f1.read, f0.total);
  EXPECT_LE(f0.read + f1.read, f0.total * 1.05);
  expectSameParameters(trained, (dir / "full/ckpt-000000001"));
  EXPECT_NEAR(firstLoss(dir / "full.jsonl"), firstLoss(dir / "whole.jsonl"), 1e-6);
  EXPECT_GT(firstLoss(dir / "full.jsonl"), 0);

  const auto tp = run("tp", "--tp 2");
  ASSERT_EQ(tp.exit_code, 0) << tp.output;
  const Share t0 = shareOf(tp.output, 0), t1 = shareOf(tp.output, 1);
  std::printf("--tp 2: rank 0 read %lld, rank 1 %lld of %lld bytes\n", static_cast<long long>(t0.read),
              static_cast<long long>(t1.read), static_cast<long long>(t0.total));
  EXPECT_EQ(t0.total, f0.total);
  for (const Share& s : {t0, t1}) {  // half of every split weight, the norms whole
    EXPECT_GT(s.read, t0.total * 0.45) << tp.output;
    EXPECT_LT(s.read, t0.total * 0.55) << tp.output;
  }
  expectSameParameters(trained, (dir / "tp/ckpt-000000001"));
}

}  // namespace
}  // namespace dtrain
