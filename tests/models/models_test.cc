#include "common/error.h"
#include "models/model.h"

#include <gtest/gtest.h>

#include <string>

namespace dtrain::models {
namespace {

int64_t parameterCount(Model& model) {
  int64_t count = 0;
  for (const auto& p : model.parameters()) count += p.numel();
  return count;
}

ModelOptions options(int64_t channels, int64_t classes, int64_t size,
                     std::string stem = "auto") {
  ModelOptions o;
  o.in_channels = channels;
  o.num_classes = classes;
  o.image_size = size;
  o.stem = std::move(stem);
  return o;
}

void expectLogits(const std::string& name, const ModelOptions& o) {
  SCOPED_TRACE(name);
  auto model = createModel(name, o);
  model->eval();
  torch::NoGradGuard no_grad;
  auto out = model->forward(
      torch::randn({2, o.in_channels, o.image_size, o.image_size}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, o.num_classes}));
}

TEST(ModelsTest, FashionMnistShapes) {
  for (const char* name : {"mlp", "cnn", "resnet18"}) {
    expectLogits(name, options(1, 10, 28));
  }
}

TEST(ModelsTest, CifarResNetShapes) {
  for (const char* name : {"resnet18", "resnet34", "resnet50"}) {
    expectLogits(name, options(3, 10, 32));
  }
}

TEST(ModelsTest, ImageNetStemShape) {
  expectLogits("resnet18", options(3, 7, 64, "imagenet"));
}

TEST(ModelsTest, MlpHiddenWidthsConfigurable) {
  auto o = options(1, 10, 28);
  o.mlp_hidden = {256};
  auto model = createModel("mlp", o);
  // 784*256+256 + 256*10+10
  EXPECT_EQ(parameterCount(*model), 784 * 256 + 256 + 256 * 10 + 10);
}

// torchvision's published counts for the 1000-class ImageNet models.
TEST(ModelsTest, ImageNetParameterCountsMatchTorchvision) {
  const std::pair<const char*, int64_t> expected[] = {
      {"resnet18", 11'689'512}, {"resnet34", 21'797'672},
      {"resnet50", 25'557'032}};
  for (const auto& [name, count] : expected) {
    auto model = createModel(name, options(3, 1000, 224, "auto"));
    EXPECT_EQ(parameterCount(*model), count) << name;
  }
}

// Forward multiply-adds as torchvision's model cards and fvcore count them
// (4.09 G for ResNet-50 at 224, 1.81 G for ResNet-18); a multiply-add is 2
// FLOPs and training is 3 forwards.
TEST(ModelsTest, TrainingFlopsPerSampleMatchPublishedCounts) {
  auto resnet50 = createModel("resnet50", options(3, 1000, 224, "imagenet"));
  EXPECT_NEAR(resnet50->trainingFlopsPerSample() / 6, 4.09e9, 0.02 * 4.09e9);
  auto resnet18 = createModel("resnet18", options(3, 1000, 224, "imagenet"));
  EXPECT_NEAR(resnet18->trainingFlopsPerSample() / 6, 1.81e9, 0.02 * 1.81e9);
  // The MLP exactly: 784*256 + 256*128 + 128*10 multiply-adds.
  auto mlp = createModel("mlp", options(1, 10, 28));
  EXPECT_DOUBLE_EQ(mlp->trainingFlopsPerSample(), 6.0 * (784 * 256 + 256 * 128 + 128 * 10));
  // The CNN exactly: two 3x3 convolutions (28x28, then 14x14) and the head.
  auto cnn = createModel("cnn", options(1, 10, 28));
  EXPECT_DOUBLE_EQ(cnn->trainingFlopsPerSample(),
                   6.0 * (9 * 1 * 32 * 28 * 28 + 9 * 32 * 64 * 14 * 14 + 64 * 7 * 7 * 10));
}

TEST(ModelsTest, LossIsTheMeanCrossEntropyOfTheLogits) {
  torch::manual_seed(0);
  auto model = createModel("mlp", options(1, 10, 28));
  const torch::Tensor x = torch::randn({4, 1, 28, 28});
  const torch::Tensor y = torch::tensor({1, 2, 3, 4}, torch::kLong);
  const torch::Tensor expected = torch::nn::functional::cross_entropy(model->forward(x), y);
  EXPECT_TRUE(torch::allclose(model->loss(x, y), expected));
  EXPECT_EQ(model->loss(x, y).scalar_type(), torch::kFloat);
}

TEST(ModelsTest, CifarStemHasSmallConvAndNoMaxPool) {
  auto model = createModel("resnet18", options(3, 10, 32, "cifar"));
  EXPECT_EQ(parameterCount(*model), 11'173'962);
  auto params = model->named_parameters();
  ASSERT_TRUE(params.contains("conv1.weight"));
  EXPECT_EQ(params["conv1.weight"].sizes(),
            (std::vector<int64_t>{64, 3, 3, 3}));
  for (const auto& child : model->named_children()) {
    EXPECT_NE(child.key(), "maxpool");
  }
  auto imagenet = createModel("resnet18", options(3, 10, 32, "imagenet"));
  EXPECT_TRUE(imagenet->named_children().contains("maxpool"));
  EXPECT_EQ(imagenet->named_parameters()["conv1.weight"].sizes(),
            (std::vector<int64_t>{64, 3, 7, 7}));
}

TEST(ModelsTest, TorchvisionParameterNames) {
  auto model = createModel("resnet50", options(3, 1000, 224));
  auto params = model->named_parameters();
  for (const char* key :
       {"conv1.weight", "bn1.weight", "layer1.0.conv3.weight",
        "layer1.0.downsample.0.weight", "layer1.0.downsample.1.bias",
        "layer4.2.bn3.weight", "fc.weight", "fc.bias"}) {
    EXPECT_TRUE(params.contains(key)) << key;
  }
  EXPECT_TRUE(model->named_buffers().contains("bn1.running_mean"));
}

TEST(ModelsTest, TorchvisionInitialisation) {
  auto model = createModel("resnet18", options(3, 10, 32));
  auto params = model->named_parameters();
  EXPECT_TRUE(torch::equal(params["bn1.weight"], torch::ones({64})));
  EXPECT_TRUE(torch::equal(params["bn1.bias"], torch::zeros({64})));
  // kaiming normal, fan_out, relu: std = sqrt(2 / (out * k * k)).
  auto w = params["layer4.0.conv2.weight"];
  double expected_std = std::sqrt(2.0 / (512 * 3 * 3));
  EXPECT_NEAR(w.std().item<double>(), expected_std, expected_std * 0.05);
  EXPECT_NE(params["layer1.0.bn2.weight"].sum().item<double>(), 0.0);

  auto o = options(3, 10, 32);
  o.zero_init_residual = true;
  auto zeroed = createModel("resnet50", o)->named_parameters();
  EXPECT_EQ(zeroed["layer1.0.bn3.weight"].abs().sum().item<double>(), 0.0);
  EXPECT_EQ(zeroed["layer1.0.bn1.weight"].sum().item<double>(), 64.0);
}

TEST(ModelsTest, BackwardReachesEveryParameter) {
  auto model = createModel("resnet18", options(3, 10, 32, "cifar"));
  model->train();
  auto logits = model->forward(torch::randn({2, 3, 32, 32}));
  auto loss = torch::nn::functional::cross_entropy(
      logits, torch::tensor({1, 7}, torch::kLong));
  loss.backward();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>())
        << p.key();
  }
}

TEST(ModelsTest, UnknownModelNamesTheValidOnes) {
  try {
    createModel("vgg16", options(3, 10, 32));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.message();
    EXPECT_NE(msg.find("vgg16"), std::string::npos) << msg;
    for (const auto& name : modelNames()) {
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
    }
  }
}

TEST(ModelsTest, BadOptionsAreConfigErrors) {
  EXPECT_THROW(createModel("resnet18", options(3, 10, 32, "tiny")),
               ConfigError);
  EXPECT_THROW(createModel("mlp", options(0, 10, 28)), ConfigError);
  EXPECT_THROW(createModel("cnn", options(1, 10, 2)), ConfigError);
}

}  // namespace
}  // namespace dtrain::models
