// The options' model-kind defaults (train/train_options.h).
#include "train/train_options.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "tests/support/text.h"

namespace dtrain {
namespace {

// GPT-3's learning rates by size, in between and past both ends.
TEST(TrainOptionsTest, LanguageModelLearningRateFollowsGpt3BySize) {
  EXPECT_DOUBLE_EQ(languageModelLr(125'000'000), 6e-4);
  EXPECT_NEAR(languageModelLr(350'000'000), 3e-4, 1e-12);
  EXPECT_NEAR(languageModelLr(6'700'000'000), 1.2e-4, 1e-12);
  EXPECT_NEAR(languageModelLr(8'030'000'000), 1.14e-4, 0.01e-4);  // llama-8b: between 6.7B and 13B
  EXPECT_DOUBLE_EQ(languageModelLr(400'000'000'000), 6e-5);
  EXPECT_NEAR(languageModelLr(7'812'500), 1.2e-3, 1e-12);  // (125M / N)^0.25 = 2
  EXPECT_DOUBLE_EQ(languageModelLr(1000), 3e-3);
}

// Markers left alone resolve by model kind; what the flags gave stays.
TEST(TrainOptionsTest, DefaultsResolveByModelKindAndKeepWhatWasGiven) {
  TrainOptions image;
  image.model.name = "mlp";
  const TrainOptions i = withModelDefaults(image);
  EXPECT_EQ(i.optimizer.kind, OptimizerKind::kSgd);
  EXPECT_EQ(i.optimizer.lr, 0.05);
  EXPECT_EQ(i.optimizer.weight_decay, 5e-4);
  EXPECT_EQ(i.schedule.warmup_epochs, 0.2);
  EXPECT_EQ(i.schedule.min_lr, 0);

  TrainOptions lm;
  lm.model.name = "gpt2-124m";
  const TrainOptions l = withModelDefaults(lm);
  EXPECT_EQ(l.optimizer.kind, OptimizerKind::kAdamW);
  EXPECT_NEAR(l.optimizer.lr, 6e-4, 1e-5);  // 124M parameters, GPT-3's 125M row
  EXPECT_EQ(l.optimizer.beta2, 0.95);
  EXPECT_EQ(l.optimizer.weight_decay, 0.1);
  EXPECT_EQ(l.schedule.warmup_share, 0.05);
  EXPECT_EQ(l.schedule.warmup_cap, 2000);
  EXPECT_NEAR(l.schedule.min_lr, l.optimizer.lr / 10, 1e-12);

  lm.optimizer.kind = OptimizerKind::kSgd;
  lm.optimizer.lr = 0.2;
  lm.schedule.warmup_steps = 7;
  lm.schedule.min_lr = 0.01;
  const TrainOptions given = withModelDefaults(lm);
  EXPECT_EQ(given.optimizer.kind, OptimizerKind::kSgd);
  EXPECT_EQ(given.optimizer.lr, 0.2);
  EXPECT_EQ(given.schedule.warmup_steps, 7);
  EXPECT_EQ(given.schedule.warmup_share, 0);
  EXPECT_EQ(given.schedule.min_lr, 0.01);
  EXPECT_EQ(describeOptimizer(given), "sgd lr 0.2 (momentum 0.9, weight decay 0.1, warm-up 7 steps, cosine to 0.01)");
}

// --dataset chat: what it needs and what it does not run with, refused
// naming the flag.
TEST(TrainOptionsTest, ChatRunsRefuseWhatTheyCannotRun) {
  const auto errorWith = [](auto change) {
    TrainOptions o;
    o.model.name = "llama";
    o.data.dataset = DatasetKind::kChat;
    o.data.data_dir = "/tmp";
    o.data.tokenizer_dir = "/tmp";
    change(o);
    return testing::configErrorOf([&] { checkTrainOptions(withModelDefaults(o)); });
  };
  EXPECT_EQ(errorWith([](TrainOptions&) {}), "");
  EXPECT_TRUE(testing::contains(errorWith([](TrainOptions& o) { o.parallel.tp = 2; }), "--dataset chat with --tp"));
  EXPECT_TRUE(testing::contains(errorWith([](TrainOptions& o) { o.parallel.pp = 2; }), "--dataset chat with --pp"));
  EXPECT_TRUE(testing::contains(errorWith([](TrainOptions& o) { o.data.data_dir.clear(); }), "--data-dir"));
  EXPECT_TRUE(testing::contains(errorWith([](TrainOptions& o) { o.data.tokenizer_dir.clear(); }), "--tokenizer-dir"));
  EXPECT_TRUE(testing::contains(errorWith([](TrainOptions& o) { o.model.name = "cnn"; }),
                                "--dataset chat is for language models"));
}

}  // namespace
}  // namespace dtrain
