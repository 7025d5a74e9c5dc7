// The shared state of a dynamic (c10d) rendezvous (private to rendezvous/):
// one store key, /run/<id>/rdzv/state, read with get() and changed only by
// compareSet() of the whole text, so every change is atomic and an agent
// that lost a race simply reads again.
//
// Life of a round:
//   open      nodes append themselves to `participants` (join order is
//             group-rank order); the round completes when max_nodes have
//             joined, or when the last-call window after min_nodes ends.
//   complete  `participants` is frozen: it is the round's roster. A node
//             that arrives now goes to `waiting` (numNodesWaiting()).
//             A participant calling nextRendezvous() again moves to
//             `departed`; a participant found dead is moved there by anyone.
//   next      once every participant has departed, `round` goes up and the
//             new round opens empty; waiting nodes join it. The last
//             round's roster less the nodes found dead in it (`lost`),
//             and the waiting nodes, become `expected`: once every expected node still alive
//             has joined (and min_nodes have), nobody else is known to be
//             coming, and the round completes without waiting out the
//             last call. A round with nobody expected (the first) waits
//             the last call as torch's does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain {

struct RendezvousState {
  int64_t round = 0;  // the generation of the round being formed or last formed
  bool complete = false;
  bool closed = false;
  std::vector<std::string> participants;  // node ids, join order
  std::vector<std::string> departed;      // participants that left the complete round
  std::vector<std::string> waiting;       // nodes that want into the next round
  std::vector<std::string> lost;          // participants found dead (also in departed)
  std::vector<std::string> expected;      // open round: the last roster less `lost`, and the waiting

  // "round=3;complete=1;closed=0;participants=4,7;departed=7;waiting=9;lost=;expected=".
  std::string encode() const;
  // "" (the key's initial value) is the initial state; ConfigError naming
  // `key` for text that encode() did not write.
  static RendezvousState decode(const std::string& text, const std::string& key);

  bool isParticipant(const std::string& node) const;
  bool hasDeparted(const std::string& node) const;
  bool isWaiting(const std::string& node) const;
  // A participant of this round that has not left it.
  bool isActive(const std::string& node) const { return isParticipant(node) && !hasDeparted(node); }

  // Opens the next round when the complete one has no active participant
  // left. True when it did.
  bool advanceIfAllDeparted();

  bool operator==(const RendezvousState&) const = default;
};

}  // namespace dtrain
