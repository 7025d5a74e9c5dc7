#include "rendezvous/node_roster.h"

#include <charconv>

#include "common/error.h"

namespace dtrain {

std::string encodeNodeInfo(const NodeInfo& info) {
  return std::to_string(info.local_world_size) + " " + info.address;
}

NodeInfo decodeNodeInfo(const std::string& text, const std::string& key) {
  NodeInfo info;
  const size_t space = text.find(' ');
  const char* end = text.data() + (space == std::string::npos ? text.size() : space);
  auto [stop, error] = std::from_chars(text.data(), end, info.local_world_size);
  if (space == std::string::npos || error != std::errc() || stop != end ||
      info.local_world_size < 1) {
    throw ConfigError("store key '" + key + "' holds '" + text +
                      "', not a node's '<local_world_size> <address>' (is another program "
                      "using this run id?)");
  }
  info.address = text.substr(space + 1);
  return info;
}

void assignRanks(const std::vector<NodeInfo>& roster, int group_rank, RendezvousResult& result) {
  result.group_rank = group_rank;
  result.group_world_size = static_cast<int>(roster.size());
  result.rank_offset = 0;
  result.world_size = 0;
  for (size_t g = 0; g < roster.size(); ++g) {
    if (static_cast<int>(g) < group_rank) result.rank_offset += roster[g].local_world_size;
    result.world_size += roster[g].local_world_size;
  }
  result.master_addr = roster.empty() ? std::string() : roster.front().address;
}

}  // namespace dtrain
