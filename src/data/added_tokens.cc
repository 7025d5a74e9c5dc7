#include "data/added_tokens.h"

#include <algorithm>

namespace dtrain::data {

AddedTokenMatcher::AddedTokenMatcher(const std::vector<HfAddedToken>& tokens) {
  for (const HfAddedToken& token : tokens) (token.normalized ? normalized_ : exact_).add(token.content, token.id);
}

void AddedTokenMatcher::Group::add(const std::string& content, uint32_t id) {
  if (content.empty() || !ids.emplace(content, id).second) return;  // the first of equal contents wins
  if (std::find(lengths.begin(), lengths.end(), content.size()) == lengths.end()) {
    lengths.insert(std::upper_bound(lengths.begin(), lengths.end(), content.size(), std::greater<>()),
                   content.size());
  }
  starts[static_cast<unsigned char>(content[0])] = true;
}

std::pair<size_t, size_t> AddedTokenMatcher::Group::find(std::string_view text, size_t from) const {
  if (ids.empty()) return {std::string_view::npos, 0};
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (!starts[static_cast<unsigned char>(text[pos])]) continue;
    for (size_t length : lengths) {
      if (length <= text.size() - pos && ids.find(text.substr(pos, length)) != ids.end()) return {pos, length};
    }
  }
  return {std::string_view::npos, 0};
}

void AddedTokenMatcher::Group::split(std::string_view text, std::vector<Segment>& segments) const {
  const auto stretch = [&](std::string_view between) {
    if (!between.empty()) segments.push_back({between, -1});
  };
  size_t pos = 0;
  for (;;) {
    const auto [at, length] = find(text, pos);
    if (at == std::string_view::npos) break;
    stretch(text.substr(pos, at - pos));
    segments.push_back({text.substr(at, length), ids.find(text.substr(at, length))->second});
    pos = at + length;
  }
  stretch(text.substr(pos));
}

}  // namespace dtrain::data
