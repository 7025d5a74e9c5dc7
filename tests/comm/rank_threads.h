// Threads standing in for the ranks of a group (gloo's test/base_test.h
// habit): each runs the same body with its own rank and reports that rank in
// errors (setThreadRank).
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "tests/support/text.h"

namespace dtrain::testing {

// Runs body(rank) for rank 0..size-1, one thread each; returns each rank's
// failure (nullptr where it returned normally).
inline std::vector<std::exception_ptr> runOnRankThreads(int size,
                                                        const std::function<void(int rank)>& body) {
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  threads.reserve(size);
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      setThreadRank(rank);
      try {
        body(rank);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
      setThreadRank(-1);
    });
  }
  for (auto& thread : threads) thread.join();
  return errors;
}

// what() of the failure, "" for none.
inline std::string errorText(const std::exception_ptr& error) {
  if (!error) return "";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "non-standard exception";
  }
}

template <typename E>
bool errorIs(const std::exception_ptr& error) {
  if (!error) return false;
  try {
    std::rethrow_exception(error);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}


}  // namespace dtrain::testing
