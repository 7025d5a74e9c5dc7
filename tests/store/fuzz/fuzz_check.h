// FUZZ_CHECK: an invariant of the code under test. A violation aborts, so
// libFuzzer saves the input and a plain replay exits nonzero; assert() would
// vanish in the release builds the replay runs in.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition, ...)                                              \
  do {                                                                          \
    if (!(condition)) {                                                         \
      std::fprintf(stderr, "%s:%d: invariant broken: %s: ", __FILE__, __LINE__, \
                   #condition);                                                 \
      std::fprintf(stderr, __VA_ARGS__);                                        \
      std::fprintf(stderr, "\n");                                               \
      std::abort();                                                             \
    }                                                                           \
  } while (0)
