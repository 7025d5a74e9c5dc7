// `dtrain train` runs under `dtrain launch` and what their checkpoints hold,
// for the tests that compare sharded and replicated training as real
// processes (shard_test, shard_full_test, reshard_test).
#pragma once

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/checkpoint_view.h"
#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"

namespace dtrain::testing {

// A tiny GPT-2 on the embedded corpus (byte tokens), quick on two CPUs;
// its evaluations read 4 validation batches per rank (all of them would
// take most of a short run's time, and no test of it reads the loss).
inline const std::string kTinyGptRun = "--model gpt2 --layers 2 --dim 32 --heads 4 --seq-len 32 --vocab-size 320 "
                                       "--dataset text --tokenizer byte --batch-size 4 --seed 5 --progress none "
                                       "--eval-batches 4 ";

// Where this test program's runs keep the tokenized corpus (made once).
inline const std::string& corpusCacheDir() {
  static const std::string dir = makeTempDir("dtrain-train-runs-corpus");
  return dir;
}

// `dtrain launch` of `ranks` workers running `dtrain train <args>` on
// loopback (stderr folded into the output).
inline std::string launchTrain(int ranks, const std::string& args, const std::string& launcher_flags = "") {
  return dtrainBin() + " launch --nproc-per-node " + std::to_string(ranks) + " --master-port " +
         std::to_string(freePort()) + " --monitor-interval 0.1 " + launcher_flags + " " + dtrainBin() +
         " train --cache-dir " + corpusCacheDir() + " " + args + " 2>&1";
}

// The checkpoint of `step` in `dir` (a sharded checkpoint's directory).
inline std::string checkpointOf(const TempDir& dir, int step) {
  char name[32];
  std::snprintf(name, sizeof(name), "ckpt-%09d", step);
  return dir / name;
}

// The "<what> N bytes per rank" of the start line (what = "state",
// "gradients", "parameters"); -1 when absent.
inline int64_t bytesPerRank(const std::string& output, const std::string& what) {
  const size_t begin = output.find(" " + what + " ");
  if (begin == std::string::npos) return -1;
  const size_t from = begin + what.size() + 2;
  const size_t end = output.find(" bytes per rank", from);
  return end == std::string::npos ? -1 : std::stoll(output.substr(from, end - from));
}

// Every model and optimizer tensor of the two checkpoints, bit for bit, and
// the same optimizer tensors in both.
inline void expectSameState(const std::string& a_path, const std::string& b_path) {
  const CheckpointView a = readCheckpoint(a_path), b = readCheckpoint(b_path);
  int compared = 0;
  for (const auto& [key, tensor] : a.tensors) {
    if (key.rfind("model.", 0) != 0 && key.rfind("optimizer.", 0) != 0) continue;
    ASSERT_TRUE(b.tensors.count(key)) << key << " is missing from " << b_path;
    EXPECT_TRUE(tensor == b.tensors.at(key)) << key << " differs";
    ++compared;
  }
  EXPECT_GT(compared, 10);
  for (const auto& [key, tensor] : b.tensors) {
    if (key.rfind("optimizer.", 0) == 0) {
      EXPECT_TRUE(a.tensors.count(key)) << key << " only in " << b_path;
    }
  }
}

}  // namespace dtrain::testing
