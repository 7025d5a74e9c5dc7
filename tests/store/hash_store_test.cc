// HashStore runs the whole Store contract (store_test.cc).
#include "store/hash_store.h"

#include "store_contract.h"

namespace dtrain::testing {
namespace {

// Every "client" is the same in-process store.
class HashStoreHarness : public StoreHarness {
 public:
  std::shared_ptr<Store> client() override { return store_; }

 private:
  std::shared_ptr<HashStore> store_ = std::make_shared<HashStore>();
};

INSTANTIATE_TEST_SUITE_P(
    HashStore, StoreContractTest,
    ::testing::Values(StoreImplementation{
        "HashStore", [] { return std::make_unique<HashStoreHarness>(); }}),
    implementationName);

}  // namespace
}  // namespace dtrain::testing
