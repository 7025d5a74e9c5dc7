// A training worker for the equivalence tests: K steps of an MLP (or, with
// --model gpt2|llama, a tiny language model on random tokens, whose norms,
// biases and embeddings sit in slabs without weight decay) on a fixed
// stream of random global batches. Each rank trains on its slice of the
// global batch (optionally as several micro-batches under noSync); rank 0
// writes the final parameters as raw float32 to --out. With N ranks x B it
// must end where 1 rank x N*B ends. --shard gradients trains with ZeRO-2
// (reduce-scattered gradient shards, a sharded optimizer); --clip N clips
// by the global gradient norm.
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "dtrain/data_parallel.h"
#include "dtrain/init.h"
#include "dtrain/optim.h"
#include "models/language_model.h"

namespace {

struct Net : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr}, unused{nullptr};
  Net() {
    a = register_module("a", torch::nn::Linear(20, 64));
    b = register_module("b", torch::nn::Linear(64, 48));
    unused = register_module("unused", torch::nn::Linear(7, 3));  // never in the graph
    c = register_module("c", torch::nn::Linear(48, 5));
  }
  torch::Tensor forward(torch::Tensor x) { return c(torch::relu(b(torch::relu(a(x))))); }
};

// The model under test: the MLP, or a tiny language model of the family.
struct Subject {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> loss;
  std::vector<torch::Tensor> no_weight_decay;
  // A global batch of inputs and targets for step s.
  std::function<std::pair<torch::Tensor, torch::Tensor>(int64_t batch, int step)> batch;
};

Subject makeSubject(const std::string& model) {
  Subject subject;
  if (model == "mlp") {
    auto net = std::make_shared<Net>();
    subject.module = net;
    subject.loss = [net](const torch::Tensor& x, const torch::Tensor& y) {
      return torch::nn::functional::cross_entropy(net->forward(x), y);
    };
    subject.batch = [](int64_t batch, int step) {
      auto generator = at::detail::createCPUGenerator(1000 + step);
      torch::Tensor x = torch::randn({batch, 20}, generator);
      torch::Tensor y = torch::randint(0, 5, {batch}, generator);
      return std::make_pair(x, y);
    };
    return subject;
  }
  dtrain::models::LanguageModelOverrides tiny;
  tiny.layers = 2;
  tiny.dim = 32;
  tiny.heads = 4;
  tiny.kv_heads = model == "llama" ? 2 : 4;
  tiny.seq_len = 16;
  tiny.vocab_size = 64;
  const auto config = dtrain::models::namedLanguageModel(model, tiny);
  auto lm = dtrain::models::createLanguageModel(config);
  subject.module = lm;
  subject.loss = [lm](const torch::Tensor& x, const torch::Tensor& y) { return lm->loss(x, y); };
  subject.no_weight_decay = lm->noWeightDecayParameters();
  subject.batch = [config](int64_t batch, int step) {
    auto generator = at::detail::createCPUGenerator(1000 + step);
    torch::Tensor tokens = torch::randint(0, config.vocab_size, {batch, config.seq_len + 1}, generator);
    return std::make_pair(tokens.narrow(1, 0, config.seq_len).contiguous(),
                          tokens.narrow(1, 1, config.seq_len).contiguous());
  };
  return subject;
}

std::string arg(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == "--" + name) return argv[i + 1];
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = std::stoi(arg(argc, argv, "steps", "5"));
  const int64_t global_batch = std::stoll(arg(argc, argv, "global-batch", "24"));
  const std::string optimizer_name = arg(argc, argv, "optimizer", "sgd");
  const int accum = std::stoi(arg(argc, argv, "accum", "1"));
  const std::string out = arg(argc, argv, "out", "");
  torch::set_num_threads(1);

  const std::string model = arg(argc, argv, "model", "mlp");
  auto ctx = dtrain::init();
  torch::manual_seed(ctx->rank() + 7);  // different on purpose: DataParallel must broadcast rank 0's
  Subject subject = makeSubject(model);
  if (ctx->rank() == 0) {
    torch::manual_seed(1);
    subject = makeSubject(model);
  }
  subject.module->to(ctx->device());
  dtrain::DataParallelOptions options;
  options.bucket_mb = std::stod(arg(argc, argv, "bucket-mb", "25"));
  options.first_bucket_mb = std::min(1.0, options.bucket_mb);
  options.no_weight_decay = subject.no_weight_decay;
  options.shard_gradients = arg(argc, argv, "shard", "none") == "gradients";
  const double clip = std::stod(arg(argc, argv, "clip", "0"));
  dtrain::DataParallel dp(subject.module, ctx->communicator(), options);

  const auto make = [&](std::vector<dtrain::FlatSlab> slabs) -> std::unique_ptr<dtrain::Optimizer> {
    if (optimizer_name == "adamw") return dtrain::makeAdamW(std::move(slabs), {.lr = 1e-2, .weight_decay = 0.05});
    return dtrain::makeSGD(std::move(slabs), {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3,
                                              .nesterov = optimizer_name == "nesterov"});
  };
  std::unique_ptr<dtrain::Optimizer> optimizer =
      options.shard_gradients
          ? dtrain::makeShardedOptimizer(dp.shardLayout(), ctx->communicator(), make, ctx->collectiveTimeout())
          : make(dp.slabs());
  // --optimizer torch-adamw-groups: libtorch's AdamW with two parameter
  // groups of their own lr and weight decay (the first module's parameters,
  // then the rest), through dtrain::TorchOptimizer.
  std::unique_ptr<dtrain::TorchOptimizer<torch::optim::AdamW>> torch_optimizer;
  if (optimizer_name == "torch-adamw-groups") {
    std::vector<torch::Tensor> first, rest;
    const auto params = subject.module->parameters();
    for (size_t i = 0; i < params.size(); ++i) (i < 2 ? first : rest).push_back(params[i]);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(first, std::make_unique<torch::optim::AdamWOptions>(
                                   torch::optim::AdamWOptions(1e-2).weight_decay(0.05)));
    groups.emplace_back(rest, std::make_unique<torch::optim::AdamWOptions>(
                                  torch::optim::AdamWOptions(3e-3).weight_decay(0)));
    torch_optimizer = std::make_unique<dtrain::TorchOptimizer<torch::optim::AdamW>>(
        std::move(groups), torch::optim::AdamWOptions(1e-3));
  }
  const int64_t local = global_batch / ctx->size();
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = subject.batch(global_batch, s);
    x = x.narrow(0, ctx->rank() * local, local).to(ctx->device());
    y = y.narrow(0, ctx->rank() * local, local).to(ctx->device());
    if (torch_optimizer) {
      torch_optimizer->zero_grad();
    } else {
      optimizer->zeroGrad();
    }
    const int64_t micro = local / accum;
    for (int m = 0; m < accum; ++m) {
      auto loss = subject.loss(x.narrow(0, m * micro, micro), y.narrow(0, m * micro, micro)) / accum;
      if (m + 1 < accum) {
        auto guard = dp.noSync();
        loss.backward();
      } else {
        loss.backward();
      }
    }
    if (clip > 0 && options.shard_gradients) {
      dtrain::clipGradNorm(dp.shards(), clip, *ctx->communicator(), ctx->collectiveTimeout());
    } else if (clip > 0) {
      dtrain::clipGradNorm(dp.slabs(), clip);
    }
    if (torch_optimizer) {
      torch_optimizer->step();
    } else {
      optimizer->step();
    }
  }
  if (ctx->rank() == 0 && !out.empty()) {
    std::vector<torch::Tensor> flat;
    for (const auto& p : subject.module->parameters()) flat.push_back(p.detach().cpu().to(torch::kFloat).reshape({-1}));
    torch::Tensor all = torch::cat(flat).contiguous();
    std::ofstream file(out, std::ios::binary);
    file.write(static_cast<const char*>(all.data_ptr()), all.numel() * sizeof(float));
  }
  std::printf("rank %d done, %zu bucket(s), gradients %lld bytes, optimizer state %lld bytes\n", ctx->rank(),
              dp.buckets().size(), static_cast<long long>(dp.gradientBytes()),
              static_cast<long long>(optimizer->stateBytes()));
  return 0;
}
