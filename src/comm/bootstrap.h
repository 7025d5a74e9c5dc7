// Group bootstrap checks that every backend runs at init, before it connects
// a transport, so that a misconfigured job fails in seconds with a sentence
// naming the mistake instead of hanging until a transport timeout.
//
// The store passed in is already prefixed for this group (one prefix per
// communicator and per restart generation); keys live under "bootstrap/".
#pragma once

#include <optional>
#include <string>

#include "comm/types.h"

namespace dtrain {

class Store;

// Every rank of a group of `size` calls this once with its own `rank`.
// Returns when every rank 0..size-1 has joined with the same size.
// Throws:
// - ConfigError when rank is outside [0, size) or size < 1;
// - ConfigError "rank R claimed twice (by X and Y)" on the second claimer of a
//   rank (X, Y: owner tokens host:pid:random);
// - ConfigError "WORLD_SIZE mismatch: this rank says 3, rank 0 says 4" on a
//   rank whose size differs from rank 0's;
// - TimeoutError naming the ranks that never joined within `timeout`.
// A rank that detects a mistake publishes it (see abortGroup), and every other
// rank still waiting fails within ~20 ms with ConfigError carrying the reason.
void checkGroupConsistency(Store& store, int rank, int size, Milliseconds timeout);

// Publishes `reason` so that ranks waiting in checkGroupConsistency fail at
// once. The first reason wins. Best effort: never throws.
void abortGroup(Store& store, const std::string& reason);
// The published reason, if any rank aborted the group. Never blocks.
std::optional<std::string> groupAbortReason(Store& store);

// "host:pid:random", unique to one call (two threads of one process differ).
std::string makeOwnerToken();

}  // namespace dtrain
