#include "data/gpt2_pretokenizer.h"

#include "data/code_point_cursor.h"

namespace dtrain::data {
namespace {

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
  const size_t last = cursor.lastCharacter(pos, end);
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
