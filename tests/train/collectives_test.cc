// The public tensor collectives (include/dtrain/collectives.h) on 3 real
// ranks under `dtrain launch` (Gloo, this machine's CPUs).
#include <gtest/gtest.h>

#include <string>

#include "tests/support/command.h"

namespace dtrain {
namespace {

using testing::runCommand;

TEST(CollectivesTest, EveryCollectiveGivesTheReferenceResultOnThreeRanks) {
  const std::string worker = std::string(DTRAIN_TEST_BIN_DIR) + "/train_collectives_worker";
  auto r = runCommand(std::string(DTRAIN_BIN) + " launch --nproc-per-node 3 --standalone " + worker, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + " of 3: collectives ok"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace dtrain
