// DeviceMesh: the row-major layout of ranks (the table in device_mesh.h),
// each dimension's and a flattened group's communicator reducing exactly the
// group's ranks (ranks as threads over one HashStore, Gloo), and the shapes
// it refuses. Torch-free.
#include "parallel/device_mesh.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "store/hash_store.h"
#include "tests/comm/rank_threads.h"

namespace dtrain {
namespace {

using testing::configErrorOf;
using testing::contains;
using Ranks = std::vector<int>;

const MeshShape kCube = {{"dp_replicate", 2}, {"dp_shard", 2}, {"tp", 2}};
const std::vector<std::string> kDataParallel = {"dp_replicate", "dp_shard"};

// The table of device_mesh.h, per rank: coordinates, then the groups along
// tp, dp_shard, dp_replicate and dp_replicate+dp_shard.
struct CubeRow {
  Ranks coordinates, tp, dp_shard, dp_replicate, data_parallel;
};
const CubeRow kCubeTable[8] = {
    {{0, 0, 0}, {0, 1}, {0, 2}, {0, 4}, {0, 2, 4, 6}}, {{0, 0, 1}, {0, 1}, {1, 3}, {1, 5}, {1, 3, 5, 7}},
    {{0, 1, 0}, {2, 3}, {0, 2}, {2, 6}, {0, 2, 4, 6}}, {{0, 1, 1}, {2, 3}, {1, 3}, {3, 7}, {1, 3, 5, 7}},
    {{1, 0, 0}, {4, 5}, {4, 6}, {0, 4}, {0, 2, 4, 6}}, {{1, 0, 1}, {4, 5}, {5, 7}, {1, 5}, {1, 3, 5, 7}},
    {{1, 1, 0}, {6, 7}, {4, 6}, {2, 6}, {0, 2, 4, 6}}, {{1, 1, 1}, {6, 7}, {5, 7}, {3, 7}, {1, 3, 5, 7}},
};

TEST(DeviceMeshLayoutTest, EightRanksAsTwoByTwoByTwoFollowTheHeadersTable) {
  const MeshLayout layout(kCube, 8);
  for (int rank = 0; rank < 8; ++rank) {
    const CubeRow& row = kCubeTable[rank];
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(layout.coordinatesOf(rank), row.coordinates);
    EXPECT_EQ(layout.rankOf(row.coordinates), rank);
    EXPECT_EQ(layout.groupRanks(rank, {"tp"}), row.tp);
    EXPECT_EQ(layout.groupRanks(rank, {"dp_shard"}), row.dp_shard);
    EXPECT_EQ(layout.groupRanks(rank, {"dp_replicate"}), row.dp_replicate);
    EXPECT_EQ(layout.groupRanks(rank, kDataParallel), row.data_parallel);
    EXPECT_EQ(layout.groupRanks(rank, {"dp_replicate", "dp_shard", "tp"}), (Ranks{0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(layout.groupIndex(rank, {"tp"}), rank / 2);
    EXPECT_EQ(layout.groupIndex(rank, kDataParallel), rank % 2);
    EXPECT_EQ(layout.groupRank(rank, kDataParallel), rank / 2);
  }
}

TEST(DeviceMeshLayoutTest, FourRanksAsFourAndAsTwoByTwo) {
  const MeshLayout line({{"dp", 4}}, 4);
  const MeshLayout square({{"dp", 2}, {"tp", 2}}, 4);
  const Ranks tp_groups[4] = {{0, 1}, {0, 1}, {2, 3}, {2, 3}};
  const Ranks dp_groups[4] = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(line.coordinatesOf(rank), Ranks{rank});
    EXPECT_EQ(line.groupRanks(rank, {"dp"}), (Ranks{0, 1, 2, 3}));
    EXPECT_EQ(square.coordinatesOf(rank), (Ranks{rank / 2, rank % 2}));
    EXPECT_EQ(square.groupRanks(rank, {"tp"}), tp_groups[rank]);
    EXPECT_EQ(square.groupRanks(rank, {"dp"}), dp_groups[rank]);
  }
}

TEST(DeviceMeshLayoutTest, BadShapesAreOneLineConfigErrors) {
  EXPECT_EQ(configErrorOf([] { MeshLayout(kCube, 4); }),
            "device mesh (dp_replicate=2, dp_shard=2, tp=2) covers 8 ranks but the world has 4; "
            "expected the sizes' product to be the world size");
  EXPECT_EQ(configErrorOf([] { MeshLayout({{"dp", 0}, {"tp", 2}}, 4); }),
            "device mesh (dp=0, tp=2): dimension 'dp' has size 0; expected a size >= 1");
  EXPECT_EQ(configErrorOf([] { MeshLayout({{"tp", 2}, {"tp", 2}}, 4); }),
            "device mesh (tp=2, tp=2): dimension 'tp' is named twice; expected unique names");
  EXPECT_EQ(configErrorOf([] { MeshLayout({{"", 4}}, 4); }),
            "device mesh (=4): a dimension has an empty name; expected a name for each");
  EXPECT_TRUE(contains(configErrorOf([] { MeshLayout({{"dp/x", 4}}, 4); }), "'dp/x' has a character other than"));
  EXPECT_TRUE(contains(configErrorOf([] { MeshLayout({}, 1); }), "expected at least one dimension"));
  EXPECT_TRUE(contains(configErrorOf([] { MeshLayout({{"dp", 65536}, {"tp", 65536}, {"pp", 65536}}, 8); }),
                       "covers more than 2147483647 ranks but the world has 8"));
  for (const auto& message : {configErrorOf([] { MeshLayout(kCube, 4); }),
                              configErrorOf([] { MeshLayout({{"dp", 0}}, 4); })}) {
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(DeviceMeshLayoutTest, GroupsNameKnownDimensionsOnceInMeshOrder) {
  const MeshLayout layout(kCube, 8);
  EXPECT_EQ(configErrorOf([&] { layout.groupRanks(0, {"pp"}); }),
            "device mesh (dp_replicate=2, dp_shard=2, tp=2) has no dimension 'pp'; its dimensions: "
            "dp_replicate, dp_shard, tp");
  EXPECT_TRUE(contains(configErrorOf([&] { layout.groupRanks(0, {"tp", "tp"}); }), "'tp' is named twice in {tp, tp}"));
  EXPECT_TRUE(contains(configErrorOf([&] { layout.groupRanks(0, {"dp_shard", "dp_replicate"}); }),
                       "{dp_shard, dp_replicate} are out of mesh order"));
  EXPECT_TRUE(contains(configErrorOf([&] { layout.coordinatesOf(8); }), "rank 8 is outside the world; expected 0..7"));
}

DeviceMeshOptions glooMeshOptions() {
  DeviceMeshOptions options;
  options.backend = "gloo";
  options.communicator.init_timeout = std::chrono::seconds(60);
  options.communicator.progress_interval = std::chrono::milliseconds(100);
  return options;
}

// One mesh per rank thread over one HashStore; body(mesh, rank) on each.
// Returns the store, for the keys the groups left.
std::shared_ptr<HashStore> runMesh(const MeshShape& shape, int world_size, const DeviceMeshOptions& options,
                                   const std::function<void(DeviceMesh&, int rank)>& body) {
  auto store = std::make_shared<HashStore>();
  auto errors = testing::runOnRankThreads(world_size, [&](int rank) {
    DeviceMesh mesh(shape, store, rank, world_size, options);
    body(mesh, rank);
  });
  for (int rank = 0; rank < world_size; ++rank) {
    EXPECT_EQ(errors[rank], nullptr) << "rank " << rank << ": " << testing::errorText(errors[rank]);
  }
  return store;
}

bool joined(Store& store, const std::string& group_prefix) { return store.check({group_prefix + "/bootstrap/joined"}); }

// Every rank adds 1 << rank: the sum is the OR of the group's bits exactly
// when the communicator spans the group's ranks and no others.
void expectGroupSum(Communicator& comm, int rank, const Ranks& group) {
  ASSERT_EQ(comm.size(), static_cast<int>(group.size()));
  int64_t expected = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    expected |= int64_t{1} << group[i];
    if (group[i] == rank) {
      EXPECT_EQ(comm.rank(), static_cast<int>(i));
    }
  }
  int64_t value = int64_t{1} << rank;
  Buffer buffer{&value, 1, DType::kInt64, Device::cpu(), nullptr};
  comm.allreduce(buffer, buffer)->wait(std::chrono::seconds(60));
  EXPECT_EQ(value, expected) << "rank " << rank << " over " << ::testing::PrintToString(group);
}

class DeviceMeshTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!backendAvailable("gloo")) GTEST_SKIP() << "gloo was not built in";
  }
};

TEST_F(DeviceMeshTest, EightRanksReduceOverEachDimensionAndTheDataParallelGroup) {
  DeviceMeshOptions options = glooMeshOptions();
  options.flattened = {kDataParallel};
  runMesh(kCube, 8, options, [](DeviceMesh& mesh, int rank) {
    const CubeRow& row = kCubeTable[rank];
    EXPECT_EQ(mesh.coordinates(), row.coordinates);
    EXPECT_EQ(mesh.coordinate("dp_shard"), row.coordinates[1]);
    EXPECT_EQ(mesh.groupRanks("tp"), row.tp);
    EXPECT_EQ(mesh.groupRanks(kDataParallel), row.data_parallel);
    expectGroupSum(*mesh.communicator("dp_replicate"), rank, row.dp_replicate);
    expectGroupSum(*mesh.communicator("dp_shard"), rank, row.dp_shard);
    expectGroupSum(*mesh.communicator("tp"), rank, row.tp);
    expectGroupSum(*mesh.communicator(kDataParallel), rank, row.data_parallel);
    EXPECT_EQ(mesh.flatten(kDataParallel), mesh.communicator(kDataParallel));
  });
}

TEST_F(DeviceMeshTest, FourRanksAsTwoByTwoFlattenOnDemand) {
  DeviceMeshOptions options = glooMeshOptions();
  options.store_prefix = "job/mesh";
  auto store = runMesh({{"dp", 2}, {"tp", 2}}, 4, options, [](DeviceMesh& mesh, int rank) {
    EXPECT_TRUE(contains(configErrorOf([&] { mesh.communicator({"dp", "tp"}); }), "no group over {dp, tp}"));
    expectGroupSum(*mesh.communicator("tp"), rank, {rank / 2 * 2, rank / 2 * 2 + 1});
    expectGroupSum(*mesh.communicator("dp"), rank, {rank % 2, rank % 2 + 2});
    expectGroupSum(*mesh.flatten({"dp", "tp"}), rank, {0, 1, 2, 3});
  });
  // Each group bootstrapped under "<store_prefix>/group/<dims>/<index>".
  for (const char* group : {"tp/0", "tp/1", "dp/0", "dp/1", "dp+tp/0"}) {
    EXPECT_TRUE(joined(*store, std::string("job/mesh/group/") + group)) << group;
  }
  EXPECT_FALSE(joined(*store, "job/mesh/group/tp/2"));
}

TEST_F(DeviceMeshTest, FourRanksAsFourReuseTheWorldCommunicator) {
  auto store = std::make_shared<HashStore>();
  auto errors = testing::runOnRankThreads(4, [&](int rank) {
    DeviceMeshOptions options = glooMeshOptions();
    CommunicatorOptions world_options = options.communicator;
    world_options.store_prefix = "world";
    options.world_communicator = createCommunicator("gloo", store, rank, 4, world_options);
    DeviceMesh mesh({{"dp", 4}}, store, rank, 4, options);
    EXPECT_EQ(mesh.coordinates(), Ranks{rank});
    EXPECT_EQ(mesh.groupRanks("dp"), (Ranks{0, 1, 2, 3}));
    EXPECT_EQ(mesh.communicator("dp"), options.world_communicator);
    expectGroupSum(*mesh.communicator("dp"), rank, {0, 1, 2, 3});
  });
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(errors[rank], nullptr) << testing::errorText(errors[rank]);
}

TEST_F(DeviceMeshTest, ADimensionOfOneIsARankAloneAndAddsNoGroup) {
  auto store = runMesh({{"dp_replicate", 1}, {"dp_shard", 4}}, 4, glooMeshOptions(), [](DeviceMesh& mesh, int rank) {
    EXPECT_EQ(mesh.coordinates(), (Ranks{0, rank}));
    expectGroupSum(*mesh.communicator("dp_replicate"), rank, {rank});
    expectGroupSum(*mesh.communicator("dp_shard"), rank, {0, 1, 2, 3});
    EXPECT_EQ(mesh.flatten({"dp_replicate", "dp_shard"}), mesh.communicator("dp_shard"));
  });
  for (int rank = 0; rank < 4; ++rank) EXPECT_TRUE(joined(*store, "mesh/rank/" + std::to_string(rank))) << rank;
  EXPECT_TRUE(joined(*store, "mesh/group/dp_shard/0"));
}

TEST_F(DeviceMeshTest, AWorldCommunicatorOfAnotherSizeIsRefused) {
  auto store = std::make_shared<HashStore>();
  DeviceMeshOptions options = glooMeshOptions();
  options.world_communicator = createCommunicator("gloo", store, 0, 1, options.communicator);
  EXPECT_EQ(configErrorOf([&] { DeviceMesh({{"dp", 2}}, store, 0, 2, options); }),
            "device mesh (dp=2): the world communicator is rank 0 of 1; expected rank 0 of 2");
}

}  // namespace
}  // namespace dtrain
