// Llama 3's pre-tokenizer, and Qwen 2's (the same but for digits): the text
// cut into the pieces that byte-pair encoding then works on, one at a time
// (torch-free; library dtrain_text).
//
// The pieces are exactly the matches, left to right, of the pattern of
// Llama 3's tokenizer.json (a Split pre-tokenizer, behavior Isolated)
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// (one line), with \p{N} in place of \p{N}{1,3} in Qwen 2's, evaluated by
// hand over UTF-8 code points with the classes of data/unicode_classes.h.
// Compared with GPT-2's (data/gpt2_pretokenizer.h): contractions in either
// case, a word takes any one non-letter, non-digit character before it (a
// space, a tab, "(") except a line break, digits go in groups of at most
// three, punctuation takes the line breaks after it, and a run of spaces
// ends at its last line break. The pieces cover the text without gaps.
// Bytes that are not well-formed UTF-8 count as one "other" character each.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace dtrain::data {

// Appends the pieces of `text` to `pieces` (views into `text`). `max_digits`
// is 3 for Llama 3's pattern and 1 for Qwen 2's.
void splitLlama3Pieces(std::string_view text, size_t max_digits, std::vector<std::string_view>& pieces);

}  // namespace dtrain::data
