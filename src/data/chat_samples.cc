#include "data/chat_samples.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "common/error.h"
#include "data/tokenizer.h"

namespace dtrain::data {

int64_t ChatSample::trainedTokens() const {
  return std::count(trained.begin(), trained.end(), uint8_t{1});
}

ChatSample tokenizeChat(const Tokenizer& tokenizer, ChatTemplate format, const std::vector<ChatMessage>& messages) {
  ChatSample sample;
  for (const ChatPiece& piece : renderChat(format, messages)) {
    tokenizer.encodeInto(piece.text, sample.tokens);
    sample.trained.resize(sample.tokens.size(), piece.trained ? 1 : 0);
  }
  return sample;
}

void ChatPacking::writeRow(int64_t r, int64_t* inputs, int64_t* targets, int64_t* positions) const {
  int64_t at = 0;
  for (int32_t s : rows.at(static_cast<size_t>(r))) {
    const ChatSample& sample = samples[static_cast<size_t>(s)];
    const int64_t n = static_cast<int64_t>(sample.tokens.size());
    for (int64_t i = 0; i < n; ++i) {
      inputs[at + i] = sample.tokens[i];
      targets[at + i] = i + 1 < n && sample.trained[i + 1] ? int64_t{sample.tokens[i + 1]} : kIgnoreTarget;
      positions[at + i] = i;
    }
    at += n;
  }
  for (int64_t i = 0; at < seq_len; ++at, ++i) {
    inputs[at] = pad_id;
    targets[at] = kIgnoreTarget;
    positions[at] = i;
  }
}

bool ChatPacking::singleDocument(int64_t r) const {
  const std::vector<int32_t>& row = rows.at(static_cast<size_t>(r));
  return row.size() == 1 && static_cast<int64_t>(samples[static_cast<size_t>(row[0])].tokens.size()) == seq_len;
}

int64_t ChatPacking::tokens() const {
  int64_t n = 0;
  for (const ChatSample& s : samples) n += static_cast<int64_t>(s.tokens.size());
  return n;
}

int64_t ChatPacking::trainedTokens() const {
  int64_t n = 0;
  for (const ChatSample& s : samples) n += s.trainedTokens();
  return n;
}

ChatPacking packChatSamples(std::vector<ChatSample> samples, int64_t seq_len, uint32_t pad_id) {
  if (seq_len < 1) throw ConfigError("packChatSamples: seq_len must be >= 1, got " + std::to_string(seq_len));
  ChatPacking packing;
  packing.seq_len = seq_len;
  packing.pad_id = pad_id;
  packing.samples = std::move(samples);
  std::vector<int32_t> order(packing.samples.size());
  std::iota(order.begin(), order.end(), 0);
  const auto length = [&](int32_t s) {
    return static_cast<int64_t>(packing.samples[static_cast<size_t>(s)].tokens.size());
  };
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return length(a) > length(b); });
  // Free space -> the rows with that much left (equal ones in the order they got it).
  std::multimap<int64_t, int32_t> free_rows;
  for (int32_t s : order) {
    const int64_t n = length(s);
    if (n > seq_len) {
      throw ConfigError("packChatSamples: a sample of " + std::to_string(n) + " tokens does not fit a row of " +
                        std::to_string(seq_len));
    }
    if (n == 0) continue;
    auto fit = free_rows.lower_bound(n);
    int32_t row = 0;
    int64_t left = 0;
    if (fit == free_rows.end()) {
      row = static_cast<int32_t>(packing.rows.size());
      packing.rows.emplace_back();
      left = seq_len;
    } else {
      row = fit->second;
      left = fit->first;
      free_rows.erase(fit);
    }
    packing.rows[static_cast<size_t>(row)].push_back(s);
    if (left - n > 0) free_rows.emplace(left - n, row);
  }
  return packing;
}

}  // namespace dtrain::data
