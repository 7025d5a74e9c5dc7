#include "data/gpt2_pretokenizer.h"

#include "data/unicode_classes.h"
#include "data/utf8.h"

namespace dtrain::data {
namespace {

// The text as code points with their classes, read one at a time.
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

 private:
  std::string_view text_;
};

// 's 't 're 've 'm 'll 'd (lower case only, as in GPT-2): the length, or 0.
size_t contractionLength(std::string_view rest) {
  if (rest.size() < 2 || rest[0] != '\'') return 0;
  const char a = rest[1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (rest.size() >= 3) {
    const std::string_view two = rest.substr(1, 2);
    if (two == "re" || two == "ve" || two == "ll") return 3;
  }
  return 0;
}

// The end of the piece that starts at `pos` (not at the end of the text).
size_t pieceEnd(const CodePointCursor& cursor, std::string_view text, size_t pos) {
  if (size_t n = contractionLength(text.substr(pos))) return pos + n;
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional ASCII space,
  // then a run of one class. A space before anything else falls through.
  const size_t start = text[pos] == ' ' ? pos + 1 : pos;
  if (!cursor.atEnd(start)) {
    const CharClass c = cursor.charClass(start);
    if (c != CharClass::kSpace) return cursor.skipRun(start, c);
  }
  // "\s+(?!\S)" then "\s+": a run of spaces, less its last character when a
  // non-space follows, so that character can lead the next word (" word").
  const size_t end = cursor.skipRun(pos, CharClass::kSpace);
  if (cursor.atEnd(end)) return end;
  size_t last = pos;
  for (size_t p = pos; p < end; p += cursor.length(p)) last = p;
  return last > pos ? last : end;
}

}  // namespace

void splitGpt2Pieces(std::string_view text, std::vector<std::string_view>& pieces) {
  const CodePointCursor cursor(text);
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = pieceEnd(cursor, text, pos);
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace dtrain::data
