#include "comm/communicator.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "store/hash_store.h"
#include "tests/comm/rank_threads.h"

namespace dtrain {
namespace {

using testing::contains;

TEST(CreateCommunicatorTest, UnknownBackendIsConfigErrorListingBuiltOnes) {
  try {
    createCommunicator("mpi", std::make_shared<HashStore>(), 0, 1);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.message(), "unknown backend 'mpi'")) << e.message();
#ifdef DTRAIN_HAVE_GLOO
    EXPECT_TRUE(contains(e.message(), "gloo")) << e.message();
#endif
#ifdef DTRAIN_HAVE_NCCL
    EXPECT_TRUE(contains(e.message(), "nccl")) << e.message();
#endif
  }
}

TEST(CreateCommunicatorTest, BackendAvailabilityFollowsTheBuild) {
  EXPECT_FALSE(backendAvailable("mpi"));
#ifdef DTRAIN_HAVE_GLOO
  EXPECT_TRUE(backendAvailable("gloo"));
#else
  EXPECT_FALSE(backendAvailable("gloo"));
  EXPECT_THROW(createCommunicator("gloo", std::make_shared<HashStore>(), 0, 1), ConfigError);
#endif
#ifdef DTRAIN_HAVE_NCCL
  EXPECT_TRUE(backendAvailable("nccl"));
#else
  EXPECT_FALSE(backendAvailable("nccl"));
#endif
}

}  // namespace
}  // namespace dtrain
