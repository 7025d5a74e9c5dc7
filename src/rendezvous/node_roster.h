// What each agent publishes about itself, and how a round's roster turns
// into ranks (private to rendezvous/; shared by the static and dynamic
// handlers).
#pragma once

#include <string>
#include <vector>

#include "rendezvous/rendezvous.h"

namespace dtrain {

struct NodeInfo {
  int local_world_size = 1;
  std::string address;  // as peers reach this node (MASTER_ADDR when group rank 0)
};

// "<local_world_size> <address>".
std::string encodeNodeInfo(const NodeInfo& info);
// ConfigError naming `key` when `text` is not what encodeNodeInfo() writes.
NodeInfo decodeNodeInfo(const std::string& text, const std::string& key);

// Fills group_rank, group_world_size, rank_offset, world_size and
// master_addr of `result` for the node at `group_rank` of `roster` (nodes in
// group-rank order): worker ranks are contiguous per node in that order.
void assignRanks(const std::vector<NodeInfo>& roster, int group_rank, RendezvousResult& result);

}  // namespace dtrain
