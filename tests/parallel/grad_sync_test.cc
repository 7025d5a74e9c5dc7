// The gradient-synchronisation pieces (parallel/grad_sync.h) driven as
// DataParallel's backward driver drives them, without autograd: two ranks
// as threads over Gloo on an in-memory store, three parameters in two
// slabs (one weight-decayed, one not), one bucket each.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "comm/communicator.h"
#include "common/error.h"
#include "parallel/all_reduce_buckets.h"
#include "parallel/bucket_plan.h"
#include "parallel/reduce_scatter_buckets.h"
#include "store/hash_store.h"
#include "tests/comm/rank_threads.h"

namespace dtrain {
namespace {

// What the pieces tell an observer, in order.
struct Recorder : GradSyncObserver {
  std::vector<std::string> calls;
  void bucketLaunching(int b, void*) override { calls.push_back("launching " + std::to_string(b)); }
  void bucketLaunched(int b, void*) override { calls.push_back("launched " + std::to_string(b)); }
  void bucketCompleted(int b) override { calls.push_back("completed " + std::to_string(b)); }
};

// Parameters of 300, 200 and 100 floats; the second is not decayed, so it
// has a slab of its own. Buckets of ~1 KiB: one parameter each.
FlatLayout plannedLayout(GradSync& piece, int64_t world) {
  FlatLayout layout;
  for (int64_t n : {300, 200, 100}) layout.params.push_back(torch::zeros({n}).requires_grad_());
  SlabPlan plan = planSlabs(layout.params, 0.001, 0.001, {true, false, true});
  for (const SlabLayout& slab : plan.slabs) {
    layout.slab_numel.push_back(slab.numel);
    layout.slab_dtype.push_back(slab.dtype);
  }
  if (piece.bucketMultiple(world) > 1) plan = padBuckets(std::move(plan), piece.bucketMultiple(world), layout.pieces);
  layout.buckets = plan.buckets;
  layout.bucket_of_param = plan.bucket_of_param;
  layout.param_offset.assign(layout.params.size(), 0);
  for (const SlabLayout& slab : plan.slabs) {
    for (size_t k = 0; k < slab.params.size(); ++k) layout.param_offset[static_cast<size_t>(slab.params[k])] = slab.offsets[k];
    layout.padded_numel.push_back(slab.numel);
    layout.slabs.push_back({torch::zeros({slab.numel}), piece.keepsFullGradients() ? torch::zeros({slab.numel}) : torch::Tensor(),
                            slab.weight_decay});
  }
  return layout;
}

// One synchronised backward, as the driver runs it on the CPU: gradients
// arrive in reverse registration order, and each bucket whose gradients
// are all there launches, in launch order.
void syncOnce(GradSync& piece, const FlatLayout& layout, const std::vector<int>& order) {
  piece.started();
  std::vector<int> pending;
  for (const Bucket& bucket : layout.buckets) pending.push_back(static_cast<int>(bucket.params.size()));
  std::vector<std::shared_ptr<Work>> works;
  size_t next = 0;
  for (int i = static_cast<int>(layout.params.size()) - 1; i >= 0; --i) {
    const int b = layout.bucket_of_param[static_cast<size_t>(i)];
    piece.gradientReady(i, b);
    --pending[static_cast<size_t>(b)];
    while (next < order.size() && pending[static_cast<size_t>(order[next])] == 0) {
      piece.prepare(order[next]);
      works.push_back(piece.launch(order[next++]));
    }
  }
  piece.finish(works);
}

TEST(GradSyncTest, AllReduceBucketsAverageTheGradientSlabsInPlanOrder) {
  auto store = std::make_shared<HashStore>();
  const auto errors = testing::runOnRankThreads(2, [&](int rank) {
    AllReduceBuckets piece;
    EXPECT_EQ(piece.bucketMultiple(2), 1);
    EXPECT_FALSE(piece.reducesEveryBackward()) << "noSync() accumulates into the slabs";
    FlatLayout layout = plannedLayout(piece, 2);
    ASSERT_EQ(layout.buckets.size(), 3u);
    SyncContext context;
    context.comm = createCommunicator("gloo", store, rank, 2);
    Recorder recorder;
    context.observer = &recorder;
    piece.attach(layout, context);
    const std::vector<int> order = piece.launchOrder(layout.buckets);
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
    for (const FlatSlab& slab : layout.slabs) slab.grad.fill_(rank + 1.0);
    syncOnce(piece, layout, order);
    for (const FlatSlab& slab : layout.slabs) EXPECT_TRUE(torch::all(slab.grad == 1.5).item<bool>());
    EXPECT_EQ(recorder.calls, (std::vector<std::string>{"launching 0", "launched 0", "launching 1", "launched 1",
                                                         "launching 2", "launched 2", "completed 0", "completed 1",
                                                         "completed 2"}));
    EXPECT_EQ(piece.gradientBytes(), (layout.padded_numel[0] + layout.padded_numel[1]) * 4);
    piece.zeroGrad(false);
    for (const FlatSlab& slab : layout.slabs) EXPECT_EQ(slab.grad.abs().sum().item<float>(), 0.0f);
  });
  for (const auto& e : errors) EXPECT_EQ(testing::errorText(e), "");
}

TEST(GradSyncTest, ReduceScatterBucketsKeepEachRanksSliceOfTheAverageAndNoFullGradient) {
  auto store = std::make_shared<HashStore>();
  const auto errors = testing::runOnRankThreads(2, [&](int rank) {
    ReduceScatterBuckets piece(torch::kFloat);
    EXPECT_EQ(piece.bucketMultiple(2), 128);
    EXPECT_TRUE(piece.reducesEveryBackward()) << "no full gradient to accumulate into";
    FlatLayout layout = plannedLayout(piece, 2);
    EXPECT_FALSE(layout.slabs[0].grad.defined());
    SyncContext context;
    context.comm = createCommunicator("gloo", store, rank, 2);
    Recorder recorder;
    context.observer = &recorder;
    piece.attach(layout, context);
    // Buckets by their earliest parameter, latest first, across slabs:
    // bucket 0 holds parameter 2, bucket 2 parameter 1, bucket 1 parameter 0.
    const std::vector<int> order = piece.launchOrder(layout.buckets);
    EXPECT_EQ(order, (std::vector<int>{0, 2, 1}));
    for (const torch::Tensor& p : layout.params) p.mutable_grad() = torch::full_like(p, rank + 1.0);
    syncOnce(piece, layout, order);
    for (const torch::Tensor& p : layout.params) EXPECT_FALSE(p.grad().defined()) << "the gradient is dropped once staged";
    ASSERT_EQ(piece.shards().size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      const ShardPiece& shard_piece = layout.pieces[k];
      const FlatSlab& shard = piece.shards()[k];
      ASSERT_EQ(shard.grad.numel(), shard_piece.numel / 2);
      // This rank's slice: the average where the parameter lies, 0 in the padding.
      const int64_t begin = shard_piece.offset + rank * (shard_piece.numel / 2);
      for (int64_t e = 0; e < shard.grad.numel(); ++e) {
        const bool in_param = begin + e < shard_piece.offset + shard_piece.logical_numel;
        EXPECT_EQ(shard.grad[e].item<float>(), in_param ? 1.5f : 0.0f) << "bucket " << k << " element " << e;
      }
      EXPECT_EQ(shard.param.data_ptr(),
                layout.slabs[static_cast<size_t>(shard_piece.slab)].param.narrow(0, begin, 1).data_ptr());
    }
    EXPECT_EQ(recorder.calls, (std::vector<std::string>{"launching 0", "launched 0", "launching 2", "launched 2",
                                                         "completed 0", "launching 1", "launched 1", "completed 2",
                                                         "completed 1"}))
        << "a third bucket reuses the oldest staging buffer once its reduce-scatter is done";
    // Two staging buffers of the largest bucket (384 floats), plus the shards.
    int64_t shard_bytes = 0;
    for (const FlatSlab& shard : piece.shards()) shard_bytes += shard.grad.numel() * 4;
    EXPECT_EQ(piece.gradientBytes(), shard_bytes + 2 * 384 * 4);
    // A second backward adds into the shards; zeroGrad clears them.
    for (const torch::Tensor& p : layout.params) p.mutable_grad() = torch::full_like(p, rank + 1.0);
    syncOnce(piece, layout, order);
    EXPECT_EQ(piece.shards()[0].grad[0].item<float>(), 3.0f);
    piece.zeroGrad(false);
    EXPECT_EQ(piece.shards()[0].grad.abs().sum().item<float>(), 0.0f);
  });
  for (const auto& e : errors) EXPECT_EQ(testing::errorText(e), "");
}

TEST(GradSyncTest, ReduceScatterBucketsAddAStagingBufferOnlyWhileEveryOneIsBeingFilled) {
  auto store = std::make_shared<HashStore>();
  const auto errors = testing::runOnRankThreads(2, [&](int rank) {
    ReduceScatterBuckets piece(torch::kBFloat16);
    FlatLayout layout = plannedLayout(piece, 2);
    SyncContext context;
    context.comm = createCommunicator("gloo", store, rank, 2);
    piece.attach(layout, context);
    for (int b = 0; b < 3; ++b) EXPECT_EQ(piece.bucketDtype(b), torch::kBFloat16);
    int64_t shard_bytes = 0;
    for (const FlatSlab& shard : piece.shards()) shard_bytes += shard.grad.numel() * 4;
    // Three buckets filling at once (their gradients arrive interleaved).
    for (int b = 0; b < 3; ++b) piece.prepare(b);
    EXPECT_EQ(piece.gradientBytes(), shard_bytes + 3 * 384 * 2) << "bf16 staging: 2 bytes an element";
    std::vector<std::shared_ptr<Work>> works;
    for (int b : piece.launchOrder(layout.buckets)) works.push_back(piece.launch(b));
    piece.finish(works);
  });
  for (const auto& e : errors) EXPECT_EQ(testing::errorText(e), "");
  EXPECT_THROW(ReduceScatterBuckets(torch::kHalf), ConfigError);
}

}  // namespace
}  // namespace dtrain
