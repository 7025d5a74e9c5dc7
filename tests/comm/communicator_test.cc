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

#ifdef DTRAIN_HAVE_NCCL
// The NCCL backend is a library of its own (libdtrain_nccl.so) that this
// test program does not link: making an nccl communicator loads it. Where
// the CUDA runtime and NCCL are installed it loads, and what fails on a
// machine without GPUs is CUDA or NCCL itself, never the loading.
TEST(CreateCommunicatorTest, TheNcclBackendIsLoadedOnDemand) {
  CommunicatorOptions options;
  options.init_timeout = std::chrono::seconds(5);
  try {
    auto comm = createCommunicator("nccl", std::make_shared<HashStore>(), 0, 1, options);
    EXPECT_EQ(comm->size(), 1);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.message()).find("does not load"), std::string::npos) << e.message();
  }
}
#endif

}  // namespace
}  // namespace dtrain
