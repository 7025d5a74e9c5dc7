#include "data/unicode_classes.h"

#include <algorithm>
#include <array>
#include <span>

namespace dtrain::data {
namespace {

struct CodePointRange {
  char32_t first, last;
};

#include "data/unicode_class_table.inc"

bool inRanges(std::span<const CodePointRange> ranges, char32_t code_point) {
  auto after = std::upper_bound(ranges.begin(), ranges.end(), code_point,
                                [](char32_t cp, const CodePointRange& r) { return cp < r.first; });
  return after != ranges.begin() && code_point <= std::prev(after)->last;
}

// ASCII is most of most text: one table look-up instead of three searches.
constexpr std::array<CharClass, 128> asciiClasses() {
  std::array<CharClass, 128> classes{};
  for (char32_t c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      classes[c] = CharClass::kLetter;
    } else if (c >= '0' && c <= '9') {
      classes[c] = CharClass::kNumber;
    } else if (c == ' ' || (c >= '\t' && c <= '\r')) {
      classes[c] = CharClass::kSpace;
    } else {
      classes[c] = CharClass::kOther;
    }
  }
  return classes;
}

constexpr std::array<CharClass, 128> kAsciiClasses = asciiClasses();

}  // namespace

CharClass classifyCodePoint(char32_t code_point) {
  if (code_point < 128) return kAsciiClasses[code_point];
  if (inRanges(kLetterRanges, code_point)) return CharClass::kLetter;
  if (inRanges(kNumberRanges, code_point)) return CharClass::kNumber;
  if (inRanges(kSpaceRanges, code_point)) return CharClass::kSpace;
  return CharClass::kOther;
}

}  // namespace dtrain::data
