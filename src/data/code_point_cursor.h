// The text as code points with their classes, read one at a time: what the
// hand-written pre-tokenizers (data/gpt2_pretokenizer.h,
// data/llama3_pretokenizer.h) walk instead of a regular-expression engine
// (torch-free; library dtrain_text). A byte that does not start well-formed
// UTF-8 is one character of class "other", so any bytes still split, encode
// and decode back.
#pragma once

#include <cstddef>
#include <string_view>

#include "data/unicode_classes.h"
#include "data/utf8.h"

namespace dtrain::data {

class CodePointCursor {
 public:
  explicit CodePointCursor(std::string_view text) : text_(text) {}

  bool atEnd(size_t pos) const { return pos >= text_.size(); }
  // Byte length of the character at `pos` (an invalid byte is one character).
  size_t length(size_t pos) const {
    char32_t cp;
    const size_t n = decodeUtf8(text_, pos, &cp);
    return n == 0 ? 1 : n;
  }
  CharClass charClass(size_t pos) const {
    char32_t cp;
    return decodeUtf8(text_, pos, &cp) == 0 ? CharClass::kOther : classifyCodePoint(cp);
  }
  // Past the run of characters of class `c` that starts at `pos`.
  size_t skipRun(size_t pos, CharClass c) const {
    while (!atEnd(pos) && charClass(pos) == c) pos += length(pos);
    return pos;
  }
  // The start of the last character in [begin, end) (begin < end).
  size_t lastCharacter(size_t begin, size_t end) const {
    size_t last = begin;
    for (size_t p = begin; p < end; p += length(p)) last = p;
    return last;
  }

 private:
  std::string_view text_;
};

}  // namespace dtrain::data
