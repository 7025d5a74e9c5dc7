// common/heap.h: after keepFreedHeapForReuse(), blocks of the sizes a
// training step allocates (activations of megabytes) come from the heap
// and stay there once freed, instead of being mapped and unmapped on every
// step; a user's own glibc tuning is left as it is.
#include "common/heap.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <stdlib.h>

#include <cstring>
#include <vector>

namespace dtrain {
namespace {

#if defined(__GLIBC__)
TEST(HeapTest, GlibcTuningChosenInTheEnvironmentIsLeftAlone) {
  ASSERT_EQ(::setenv("MALLOC_TRIM_THRESHOLD_", "1048576", 1), 0);
  EXPECT_FALSE(keepFreedHeapForReuse());
  ASSERT_EQ(::unsetenv("MALLOC_TRIM_THRESHOLD_"), 0);
}

TEST(HeapTest, FreedMegabyteBlocksStayInTheHeapForTheNextStep) {
  ASSERT_TRUE(keepFreedHeapForReuse());
  const size_t mapped_before = ::mallinfo2().hblks;
  for (int step = 0; step < 3; ++step) {
    std::vector<void*> activations;
    for (size_t mib : {1, 6, 24}) {
      void* block = std::malloc(mib << 20);
      ASSERT_NE(block, nullptr);
      std::memset(block, step, mib << 20);
      activations.push_back(block);
    }
    EXPECT_EQ(::mallinfo2().hblks, mapped_before) << "step " << step << ": a block of 1-24 MiB was mapped";
    for (void* block : activations) std::free(block);
    // Freed, the 31 MiB are still the heap's to hand out (not trimmed away).
    EXPECT_GE(::mallinfo2().fordblks, size_t{31} << 20) << "step " << step;
  }
}
#endif

}  // namespace
}  // namespace dtrain
