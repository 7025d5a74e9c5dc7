#include "comm/bootstrap.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "common/host.h"
#include "common/error.h"
#include "common/log.h"
#include "store/store.h"

namespace dtrain {
namespace {

// Short enough that a rank fails "at once" after another rank aborted, long
// enough that 1,024 polling ranks do not flood the store server.
constexpr Milliseconds kPollInterval{20};
// Names listed in one timeout message; the rest are counted.
constexpr size_t kMaxNamedRanks = 32;

const std::string kAbortKey = "bootstrap/abort";
const std::string kJoinedKey = "bootstrap/joined";
std::string ownerKey(int rank) { return "bootstrap/rank/" + std::to_string(rank) + "/owner"; }
std::string worldSizeKey(int rank) { return "bootstrap/rank/" + std::to_string(rank) + "/world_size"; }

using Clock = std::chrono::steady_clock;

[[noreturn]] void failGroup(Store& store, const std::string& local_message,
                            const std::string& group_message) {
  abortGroup(store, group_message);
  throw ConfigError(local_message);
}

void throwIfAborted(Store& store) {
  if (auto reason = groupAbortReason(store)) {
    throw ConfigError("group aborted during bootstrap: " + *reason);
  }
}

std::string rankList(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size() && i < kMaxNamedRanks; ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  if (ranks.size() > kMaxNamedRanks) {
    text += " and " + std::to_string(ranks.size() - kMaxNamedRanks) + " more";
  }
  return text;
}

[[noreturn]] void throwNeverJoined(Store& store, int size, Milliseconds timeout) {
  std::vector<int> missing;
  for (int r = 0; r < size; ++r) {
    if (!store.check({worldSizeKey(r)})) missing.push_back(r);
  }
  std::string who = missing.empty()
                        ? std::string("some ranks did not finish joining")
                        : (missing.size() == 1 ? "rank " : "ranks ") + rankList(missing) +
                              " never joined";
  throw TimeoutError("group bootstrap timed out after " + std::to_string(timeout.count()) +
                     " ms: " + who + " (WORLD_SIZE " + std::to_string(size) +
                     "; check that every rank was started with the same store and prefix)");
}

// Blocks until `key` exists, polling so that an abort published by another
// rank or the deadline ends the wait.
void pollFor(Store& store, const std::string& key, int size, Clock::time_point deadline,
             Milliseconds timeout) {
  while (!store.check({key})) {
    throwIfAborted(store);
    if (Clock::now() >= deadline) throwNeverJoined(store, size, timeout);
    std::this_thread::sleep_for(kPollInterval);
  }
}

void checkWorldSizeAgainstRankZero(Store& store, int rank, int size, Clock::time_point deadline,
                                   Milliseconds timeout) {
  if (rank == 0) return;
  pollFor(store, worldSizeKey(0), size, deadline, timeout);
  const std::string rank0_size = store.get(worldSizeKey(0));
  if (rank0_size != std::to_string(size)) {
    const std::string tail = " says " + std::to_string(size) + ", rank 0 says " + rank0_size;
    failGroup(store, "WORLD_SIZE mismatch: this rank" + tail,
              "WORLD_SIZE mismatch: rank " + std::to_string(rank) + tail);
  }
}

}  // namespace

std::string makeOwnerToken() {
  static thread_local std::mt19937_64 generator{std::random_device{}()};
  char suffix[17];
  std::snprintf(suffix, sizeof(suffix), "%016llx", static_cast<unsigned long long>(generator()));
  return hostName() + ":" + std::to_string(::getpid()) + ":" + suffix;
}

void abortGroup(Store& store, const std::string& reason) {
  try {
    store.compareSet(kAbortKey, "", reason);
  } catch (const std::exception& e) {
    DTRAIN_LOG_WARN("could not publish group abort (" << reason << "): " << e.what());
  }
}

std::optional<std::string> groupAbortReason(Store& store) {
  if (!store.check({kAbortKey})) return std::nullopt;
  return store.get(kAbortKey);
}

void checkGroupConsistency(Store& store, int rank, int size, Milliseconds timeout) {
  if (size < 1) {
    throw ConfigError("WORLD_SIZE " + std::to_string(size) + " is invalid; expected >= 1");
  }
  if (rank < 0 || rank >= size) {
    const std::string range = " is out of range for WORLD_SIZE " + std::to_string(size) +
                              "; expected 0.." + std::to_string(size - 1);
    failGroup(store, "rank " + std::to_string(rank) + range,
              "a process was started with rank " + std::to_string(rank) + ", which" + range);
  }
  const auto deadline = Clock::now() + timeout;

  const std::string token = makeOwnerToken();
  const std::string owner = store.compareSet(ownerKey(rank), "", token);
  if (owner != token) {
    const std::string message = "rank " + std::to_string(rank) + " claimed twice (by " + owner +
                                " and " + token + ")";
    failGroup(store, message, message);
  }
  store.set(worldSizeKey(rank), std::to_string(size));

  // A rank counts itself as joined only after agreeing with rank 0, so no
  // rank can see a full group while another is about to report a mismatch.
  checkWorldSizeAgainstRankZero(store, rank, size, deadline, timeout);
  int64_t joined = store.add(kJoinedKey, 1);
  while (joined < size) {
    throwIfAborted(store);
    if (Clock::now() >= deadline) throwNeverJoined(store, size, timeout);
    std::this_thread::sleep_for(kPollInterval);
    joined = store.add(kJoinedKey, 0);
  }
  throwIfAborted(store);
}

}  // namespace dtrain
