// The Store contract as a value-parameterised suite: store_test.cc defines
// the tests once; each implementation's test file instantiates them with a
// harness that makes clients of that implementation.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "store/store.h"

namespace dtrain::testing {

// One store under test. Each client() is its own connection where the
// implementation has connections, so a blocked get() on one client does not
// hold up a set() on another.
class StoreHarness {
 public:
  virtual ~StoreHarness() = default;
  virtual std::shared_ptr<Store> client() = 0;
};

struct StoreImplementation {
  std::string name;
  std::function<std::unique_ptr<StoreHarness>()> make;
};

inline void PrintTo(const StoreImplementation& implementation, std::ostream* os) {
  *os << implementation.name;
}

inline std::string implementationName(const ::testing::TestParamInfo<StoreImplementation>& info) {
  return info.param.name;
}

class StoreContractTest : public ::testing::TestWithParam<StoreImplementation> {
 protected:
  void SetUp() override {
    harness_ = GetParam().make();
    store_ = harness_->client();
  }

  std::unique_ptr<StoreHarness> harness_;
  std::shared_ptr<Store> store_;
};

}  // namespace dtrain::testing
