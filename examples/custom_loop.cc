// A custom training loop with the dtrain library: your own model and loop,
// dtrain's data-parallel gradients, optimizer, data loader and collectives,
// through the public headers alone (it builds against an installed dtrain).
//   dtrain launch --nproc-per-node 2 build/examples/custom_loop [steps] [fashion-mnist dir]
#include <cstdio>
#include <string>

#include <torch/torch.h>

#include "dtrain/dtrain.h"

struct Net : torch::nn::Module {
  torch::nn::Linear hidden{nullptr}, out{nullptr};
  Net() {
    hidden = register_module("hidden", torch::nn::Linear(28 * 28, 128));
    out = register_module("out", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) { return out(torch::relu(hidden(x.flatten(1)))); }
};

int main(int argc, char** argv) {
  const int64_t max_steps = argc > 1 ? std::stoll(argv[1]) : 300;
  const std::string data_dir = argc > 2 ? argv[2] : "/usr/share/datasets/fashion-mnist";
  auto ctx = dtrain::init();  // RANK, WORLD_SIZE, ... from dtrain launch or torchrun
  auto net = std::make_shared<Net>();
  net->to(ctx->device());
  dtrain::DataParallel dp(net, ctx->communicator());  // broadcasts rank 0's weights
  auto optimizer = dtrain::makeSGD(dp.slabs(), {.lr = 0.1, .momentum = 0.9});

  dtrain::ImageLoader loader(*ctx, data_dir, {.batch_size = 64, .mean = {0.2860f}, .std = {0.3530f}});

  double first_loss = -1, loss_value = 0;
  int64_t step = 0;
  for (int64_t epoch = 0; step < max_steps; ++epoch) {
    loader.startEpoch(epoch);
    while (auto batch = loader.next()) {
      optimizer->zeroGrad();
      auto loss = torch::nn::functional::cross_entropy(net->forward(batch->images), batch->labels);
      loss.backward();  // gradients are averaged over ranks when this returns
      optimizer->step();
      loss_value = loss.item<double>();
      if (first_loss < 0) first_loss = loss_value;
      if (++step == max_steps) break;
    }
  }
  // Each rank's last loss, averaged over the ranks with a public collective.
  torch::Tensor mean_loss = torch::tensor({loss_value}, torch::kFloat64).to(ctx->device());
  dtrain::dist::allReduce(*ctx, mean_loss, {.op = dtrain::dist::ReduceOp::kAvg});
  if (ctx->isMain()) {
    std::printf("steps %lld, loss %.4f -> %.4f (mean of the last over %d ranks %.4f)\n", (long long)step, first_loss,
                loss_value, ctx->size(), mean_loss.item<double>());
  }
  return 0;
}
