// UTF-8 decoding for the tokenizers (torch-free; library dtrain_text).
//
// Well-formed UTF-8 is what RFC 3629 allows: no overlong forms, no
// surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no truncated
// sequence.
#pragma once

#include <cstddef>
#include <string_view>

namespace dtrain::data {

// Decodes the code point that starts at text[pos] (pos < text.size()) into
// *code_point and returns its length in bytes (1..4), or 0 when the bytes
// there are not well-formed UTF-8 (*code_point is then left unchanged).
size_t decodeUtf8(std::string_view text, size_t pos, char32_t* code_point);

// The byte offset of the first byte that does not start a well-formed
// sequence, or std::string_view::npos when all of `text` is well-formed.
size_t firstInvalidUtf8(std::string_view text);

}  // namespace dtrain::data
