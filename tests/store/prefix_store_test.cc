#include "store/prefix_store.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "store/hash_store.h"
#include "store/tcp_store.h"
#include "store_contract.h"
#include "store_test_util.h"

namespace dtrain::testing {
namespace {

using std::chrono::milliseconds;

// PrefixStore over TcpStore, the way a restarted generation uses it: every
// client is its own connection seen through the same prefix.
class PrefixOverTcpHarness : public StoreHarness {
 public:
  std::shared_ptr<Store> client() override {
    return std::make_shared<PrefixStore>(
        "/run/test/gen/0", std::make_shared<TcpStore>(clientOptionsFor(server_)));
  }

 private:
  TcpStoreServer server_{loopbackServerOptions()};
};

INSTANTIATE_TEST_SUITE_P(
    PrefixStore, StoreContractTest,
    ::testing::Values(StoreImplementation{
        "PrefixStoreOverTcpStore", [] { return std::make_unique<PrefixOverTcpHarness>(); }}),
    implementationName);

TEST(PrefixStoreTest, KeysOfTwoPrefixesAreIsolated) {
  auto base = std::make_shared<HashStore>();
  PrefixStore gen0("/run/job/gen/0", base);
  PrefixStore gen1("/run/job/gen/1", base);
  gen0.set("nccl_id", "old");
  gen0.add("barrier/count", 3);
  EXPECT_FALSE(gen1.check({"nccl_id"})) << "a new generation must not see the old one's keys";
  EXPECT_EQ(gen1.add("barrier/count", 1), 1);
  gen1.set("nccl_id", "new");
  EXPECT_EQ(gen0.get("nccl_id"), "old");
  EXPECT_EQ(gen1.get("nccl_id"), "new");
  EXPECT_EQ(base->get("/run/job/gen/0/nccl_id"), "old");
  EXPECT_TRUE(gen1.deleteKey("nccl_id"));
  EXPECT_TRUE(gen0.check({"nccl_id"}));
  // numKeys() counts the whole underlying store, as c10d's PrefixStore does.
  EXPECT_EQ(gen0.numKeys(), base->numKeys());
}

TEST(PrefixStoreTest, TimeoutNamesTheFullKeyAndUsesThePrefixStoresTimeout) {
  auto base = std::make_shared<HashStore>();  // default timeout: 300 s
  PrefixStore view("gen/7", base);
  view.setTimeout(milliseconds(100));
  try {
    view.get("missing");
    FAIL() << "get() of a missing key returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(e.message().find("gen/7/missing"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace dtrain::testing
