#include "common/heap.h"


#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "common/env.h"

namespace dtrain {

bool keepFreedHeapForReuse() {
#if defined(__GLIBC__)
  for (const char* chosen : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"}) {
    if (envString(chosen)) return false;
  }
  constexpr int kMmapThreshold = 32 << 20;  // glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit)
  constexpr int kTrimThreshold = 256 << 20;
  return ::mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && ::mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
#else
  return false;
#endif
}

}  // namespace dtrain
