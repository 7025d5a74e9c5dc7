// A Gloo group of threads over one in-process HashStore: the fast way to run
// every collective at every world size.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "comm/communicator.h"
#include "store/hash_store.h"
#include "tests/comm/rank_threads.h"

namespace dtrain::testing {

inline CommunicatorOptions glooTestOptions() {
  CommunicatorOptions options;
  options.init_timeout = std::chrono::seconds(60);
  options.progress_interval = std::chrono::milliseconds(100);
  return options;
}

// Creates one gloo communicator per rank thread and runs body(comm, rank);
// any exception is a test failure naming the rank.
inline void runGlooGroup(int size, const std::function<void(Communicator&, int rank)>& body,
                         const CommunicatorOptions& options = glooTestOptions()) {
  auto store = std::make_shared<HashStore>();
  auto errors = runOnRankThreads(size, [&](int rank) {
    auto comm = createCommunicator("gloo", store, rank, size, options);
    body(*comm, rank);
  });
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_EQ(errors[rank], nullptr) << "rank " << rank << " of " << size << ": " << errorText(errors[rank]);
  }
}

}  // namespace dtrain::testing
