#include "rendezvous/rendezvous_state.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "common/error.h"

namespace dtrain {
namespace {

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

std::string joinList(const std::vector<std::string>& list) {
  std::string out;
  for (const auto& item : list) out += (out.empty() ? "" : ",") + item;
  return out;
}

// "" splits into no items.
std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

std::string RendezvousState::encode() const {
  return "round=" + std::to_string(round) + ";complete=" + (complete ? "1" : "0") +
         ";closed=" + (closed ? "1" : "0") + ";participants=" + joinList(participants) +
         ";departed=" + joinList(departed) + ";waiting=" + joinList(waiting) + ";lost=" + joinList(lost) +
         ";expected=" + joinList(expected);
}

RendezvousState RendezvousState::decode(const std::string& text, const std::string& key) {
  RendezvousState state;
  if (text.empty()) return state;
  auto malformed = [&](const std::string& why) {
    return ConfigError("store key '" + key + "' holds a malformed rendezvous state (" + why +
                       "): '" + text + "' (is another program using this run id?)");
  };
  std::map<std::string, std::string> fields;
  for (const std::string& field : split(text, ';')) {
    size_t eq = field.find('=');
    if (eq == std::string::npos) throw malformed("field '" + field + "' has no '='");
    fields[field.substr(0, eq)] = field.substr(eq + 1);
  }
  for (const char* name : {"round", "complete", "closed", "participants", "departed", "waiting", "lost", "expected"}) {
    if (!fields.count(name)) throw malformed(std::string("no '") + name + "' field");
  }
  const std::string& round = fields["round"];
  auto [end, error] = std::from_chars(round.data(), round.data() + round.size(), state.round);
  if (error != std::errc() || end != round.data() + round.size() || state.round < 0) {
    throw malformed("round '" + round + "'");
  }
  state.complete = fields["complete"] == "1";
  state.closed = fields["closed"] == "1";
  state.participants = split(fields["participants"], ',');
  state.departed = split(fields["departed"], ',');
  state.waiting = split(fields["waiting"], ',');
  state.lost = split(fields["lost"], ',');
  state.expected = split(fields["expected"], ',');
  return state;
}

bool RendezvousState::isParticipant(const std::string& node) const {
  return contains(participants, node);
}
bool RendezvousState::hasDeparted(const std::string& node) const { return contains(departed, node); }
bool RendezvousState::isWaiting(const std::string& node) const { return contains(waiting, node); }

bool RendezvousState::advanceIfAllDeparted() {
  if (!complete) return false;
  for (const auto& node : participants) {
    if (!hasDeparted(node)) return false;
  }
  ++round;
  complete = false;
  expected.clear();
  for (const auto& node : participants) {
    if (!contains(lost, node)) expected.push_back(node);
  }
  // Nodes waiting to get in are coming too.
  for (const auto& node : waiting) {
    if (!contains(expected, node)) expected.push_back(node);
  }
  participants.clear();
  departed.clear();
  lost.clear();
  return true;
}

}  // namespace dtrain
