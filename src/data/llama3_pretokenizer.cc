#include "data/llama3_pretokenizer.h"

#include "data/code_point_cursor.h"

namespace dtrain::data {
namespace {

char asciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool isLineBreak(char c) { return c == '\r' || c == '\n'; }

// (?i:'s|'t|'re|'ve|'m|'ll|'d): the length, or 0. Case-insensitive the way
// the regex engines of tokenizers (Oniguruma) and tiktoken fold case: ASCII
// in either case, and U+017F (long s, whose case folding is "s") for s.
size_t contractionLength(std::string_view rest) {
  if (rest.size() < 2 || rest[0] != '\'') return 0;
  const char a = asciiLower(rest[1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (rest.substr(1).starts_with("\xC5\xBF")) return 3;  // 'ſ
  if (rest.size() >= 3) {
    const char b = asciiLower(rest[2]);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

// The end of the piece that starts at `pos` (not at the end of the text):
// the alternatives of the pattern in its order.
size_t pieceEnd(const CodePointCursor& cursor, std::string_view text, size_t pos, size_t max_digits) {
  if (size_t n = contractionLength(text.substr(pos))) return pos + n;
  const CharClass c = cursor.charClass(pos);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c == CharClass::kLetter) return cursor.skipRun(pos, CharClass::kLetter);
  if (c != CharClass::kNumber && !isLineBreak(text[pos])) {
    const size_t next = pos + cursor.length(pos);
    if (!cursor.atEnd(next) && cursor.charClass(next) == CharClass::kLetter) {
      return cursor.skipRun(next, CharClass::kLetter);
    }
  }
  // \p{N}{1,3}
  if (c == CharClass::kNumber) {
    size_t end = pos;
    for (size_t n = 0; n < max_digits && !cursor.atEnd(end) && cursor.charClass(end) == CharClass::kNumber; ++n) {
      end += cursor.length(end);
    }
    return end;
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n]*": an optional ASCII space, a run of "other"
  // characters, the line breaks after it.
  const size_t start = text[pos] == ' ' ? pos + 1 : pos;
  if (!cursor.atEnd(start) && cursor.charClass(start) == CharClass::kOther) {
    size_t end = cursor.skipRun(start, CharClass::kOther);
    while (!cursor.atEnd(end) && isLineBreak(text[end])) ++end;
    return end;
  }
  // Here the character at `pos` is a space. "\s*[\r\n]+": the run of spaces
  // up to its last line break (the regex backtracks from the run's end to it).
  const size_t end = cursor.skipRun(pos, CharClass::kSpace);
  for (size_t p = end; p > pos; --p) {
    if (isLineBreak(text[p - 1])) return p;
  }
  // "\s+(?!\S)" then "\s+": the run, less its last character when a
  // non-space follows, so that character can lead the next word (" word").
  if (cursor.atEnd(end)) return end;
  const size_t last = cursor.lastCharacter(pos, end);
  return last > pos ? last : end;
}

}  // namespace

void splitLlama3Pieces(std::string_view text, size_t max_digits, std::vector<std::string_view>& pieces) {
  const CodePointCursor cursor(text);
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = pieceEnd(cursor, text, pos, max_digits);
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace dtrain::data
