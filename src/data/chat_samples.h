// Conversations as token samples, and samples packed into rows of a
// language model's sequence length (torch-free; library dtrain_text).
//
// A sample is a conversation's tokens (chat_template.h's pieces, each
// tokenized on its own, so that no token straddles a trained and an
// untrained piece) and, per token, whether the loss trains on it. In a row,
// a sample of n tokens takes n positions: token i is the input at its
// position, and its target is token i + 1 when that token is trained, else
// kIgnoreTarget; the sample's last token has no target. So the loss is on
// predicting exactly the trained tokens from what precedes them in their
// own sample.
//
// Packing: best-fit decreasing (TRL's "bfd"): samples by length, longest
// first (ties in record order), each into the row whose free space is the
// smallest that holds it, else a new row. Rows are in the order they were
// opened; a row's samples in the order they went in. The tail of a row is
// padding: input pad_id, no target, a document of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/chat_records.h"
#include "data/chat_template.h"

namespace dtrain::data {

class Tokenizer;

// The target of a token the loss skips: torch's (and the fused loss's) ignore index.
inline constexpr int64_t kIgnoreTarget = -100;

struct ChatSample {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> trained;  // per token: 1 when the loss trains on it
  int64_t trainedTokens() const;
};

ChatSample tokenizeChat(const Tokenizer& tokenizer, ChatTemplate format, const std::vector<ChatMessage>& messages);

// Samples packed into rows of seq_len positions.
struct ChatPacking {
  int64_t seq_len = 0;
  uint32_t pad_id = 0;
  std::vector<ChatSample> samples;
  std::vector<std::vector<int32_t>> rows;  // each row's samples (indices into samples)
  int64_t rowCount() const { return static_cast<int64_t>(rows.size()); }
  // Row r's inputs, targets and positions (each token's position within
  // its sample, 0 where one starts; the padding counts from 0 as a sample
  // of its own), written at out_* [seq_len] each.
  void writeRow(int64_t r, int64_t* inputs, int64_t* targets, int64_t* positions) const;
  // Whether row r is one sample that fills it (no second document, no padding).
  bool singleDocument(int64_t r) const;
  int64_t tokens() const;         // of every sample
  int64_t trainedTokens() const;  // of every sample
};

// Packs `samples` (each at most seq_len tokens: the caller refuses longer
// ones) as the header says. ConfigError for seq_len < 1 or a longer sample.
ChatPacking packChatSamples(std::vector<ChatSample> samples, int64_t seq_len, uint32_t pad_id);

}  // namespace dtrain::data
