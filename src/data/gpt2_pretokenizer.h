// GPT-2's pre-tokenizer: the text cut into the pieces that byte-pair
// encoding then works on, one at a time (torch-free; library dtrain_text).
//
// The pieces are exactly the matches, left to right, of GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// evaluated by hand over UTF-8 code points, with the classes of
// data/unicode_classes.h. They cover the text without gaps, so their
// concatenation is the text. Bytes that are not well-formed UTF-8 count as
// one "other" character each (so any bytes still encode and decode back).
#pragma once

#include <string_view>
#include <vector>

namespace dtrain::data {

// Appends the pieces of `text` to `pieces` (views into `text`).
void splitGpt2Pieces(std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace dtrain::data
