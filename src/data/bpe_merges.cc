#include "data/bpe_merges.h"

#include <algorithm>
#include <functional>
#include <queue>

namespace dtrain::data {
namespace {

constexpr uint32_t kNone = UINT32_MAX;

// A candidate merge of the symbol at `left` with its right neighbour, as
// the two were when it was queued (it is stale once either changed).
struct Candidate {
  uint32_t rank;
  uint32_t left;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
};

// The symbols as a doubly linked list over their original positions: a
// merge keeps the left position and unlinks the right one.
struct SymbolList {
  std::vector<uint32_t>& ids;
  std::vector<uint32_t> prev, next;

  explicit SymbolList(std::vector<uint32_t>& symbols) : ids(symbols), prev(symbols.size()), next(symbols.size()) {
    for (uint32_t i = 0; i < symbols.size(); ++i) {
      prev[i] = i == 0 ? kNone : i - 1;
      next[i] = i + 1 == symbols.size() ? kNone : i + 1;
    }
  }
  void mergeWithNext(uint32_t left, uint32_t merged) {
    const uint32_t right = next[left];
    ids[left] = merged;
    next[left] = next[right];
    if (next[right] != kNone) prev[next[right]] = left;
    ids[right] = kNone;
  }
  void compact() {
    std::erase(ids, kNone);
  }
};

}  // namespace

void BpeMerges::add(uint32_t left, uint32_t right, uint32_t merged) {
  merges_[key(left, right)] = Merge{next_rank_++, merged};
}

const BpeMerges::Merge* BpeMerges::find(uint32_t left, uint32_t right) const {
  auto it = merges_.find(key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeMerges::apply(std::vector<uint32_t>& symbols) const {
  if (symbols.size() < 2) return;
  SymbolList list(symbols);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto push = [&](uint32_t left) {
    if (left == kNone || list.next[left] == kNone) return;
    if (const Merge* m = find(list.ids[left], list.ids[list.next[left]])) queue.push({m->rank, left});
  };
  for (uint32_t i = 0; i + 1 < symbols.size(); ++i) push(i);

  std::vector<uint32_t> lefts;
  while (!queue.empty()) {
    // One pass of encoder.py: every queued occurrence of the lowest-ranked
    // pair, left to right. Pairs this pass creates are queued for later
    // passes only, as encoder.py sees them only on its next scan.
    const uint32_t rank = queue.top().rank;
    lefts.clear();
    while (!queue.empty() && queue.top().rank == rank) {
      lefts.push_back(queue.top().left);
      queue.pop();
    }
    for (uint32_t left : lefts) {
      if (list.ids[left] == kNone || list.next[left] == kNone) continue;
      const Merge* m = find(list.ids[left], list.ids[list.next[left]]);
      if (m == nullptr || m->rank != rank) continue;  // stale: a neighbour changed
      list.mergeWithNext(left, m->merged);
      push(list.prev[left]);
      push(left);
    }
  }
  list.compact();
}

}  // namespace dtrain::data
