#include "data/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "data/utf8.h"

namespace dtrain::data {
namespace {

struct CombiningClassRange {
  char32_t first, last;
  uint8_t combining_class;
};

struct Decomposition {
  char32_t code_point, first, second;  // second 0: a singleton
  bool composes;
};

#include "data/unicode_nfc_table.inc"

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

bool isHangulSyllable(char32_t cp) { return cp >= kSBase && cp < kSBase + kSCount; }

class NfcTables {
 public:
  static const NfcTables& get() {
    static const NfcTables tables;
    return tables;
  }

  uint8_t combiningClass(char32_t cp) const {
    if (cp < 0x300) return 0;
    auto after = std::upper_bound(std::begin(kCombiningClasses), std::end(kCombiningClasses), cp,
                                  [](char32_t c, const CombiningClassRange& r) { return c < r.first; });
    if (after == std::begin(kCombiningClasses) || cp > std::prev(after)->last) return 0;
    return std::prev(after)->combining_class;
  }

  // Whether the text around `cp` may change: a combining mark, a character
  // NFC never holds (NFC_Quick_Check No), or one that may compose with the
  // character before it (Maybe). Everything below U+0300 is stable.
  bool unstable(char32_t cp) const {
    if (cp < 0x300) return false;
    if ((cp >= kVBase && cp < kVBase + kVCount) || (cp > kTBase && cp < kTBase + kTCount)) return true;
    return combiningClass(cp) != 0 || unstable_.contains(cp);
  }

  // Appends the full canonical decomposition of `cp`.
  void decompose(char32_t cp, std::vector<char32_t>& out) const {
    if (isHangulSyllable(cp)) {
      const char32_t s = cp - kSBase;
      out.push_back(kLBase + s / kNCount);
      out.push_back(kVBase + (s % kNCount) / kTCount);
      if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
      return;
    }
    auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                               [](const Decomposition& d, char32_t c) { return d.code_point < c; });
    if (it == std::end(kDecompositions) || it->code_point != cp) {
      out.push_back(cp);
      return;
    }
    decompose(it->first, out);
    if (it->second != 0) decompose(it->second, out);
  }

  // The primary composite of `first` and `second`, or 0.
  char32_t compose(char32_t first, char32_t second) const {
    if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount) {
      return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
    }
    if (isHangulSyllable(first) && (first - kSBase) % kTCount == 0 && second > kTBase && second < kTBase + kTCount) {
      return first + (second - kTBase);
    }
    auto it = compositions_.find(key(first, second));
    return it == compositions_.end() ? 0 : it->second;
  }

 private:
  NfcTables() {
    for (const Decomposition& d : kDecompositions) {
      if (d.composes) {
        compositions_.emplace(key(d.first, d.second), d.code_point);
        unstable_.insert(d.second);  // Maybe: it may join the character before it
      } else {
        unstable_.insert(d.code_point);  // No: a singleton or an excluded composite
      }
    }
  }
  static uint64_t key(char32_t a, char32_t b) { return (uint64_t{a} << 32) | b; }

  std::unordered_map<uint64_t, char32_t> compositions_;
  std::unordered_set<char32_t> unstable_;
};

void appendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Canonical composition of a decomposed, canonically ordered sequence: each
// character joins the last starter unless a character between them has
// class 0 or a class not below its own (it is blocked).
void composeInPlace(const NfcTables& tables, std::vector<char32_t>& cps) {
  size_t kept = 0;
  size_t starter = SIZE_MAX;
  int last_class = -1;  // of the last character kept after the starter; -1: none yet
  for (char32_t cp : cps) {
    const int cls = tables.combiningClass(cp);
    if (starter != SIZE_MAX && (last_class == -1 || last_class < cls)) {
      if (const char32_t composite = tables.compose(cps[starter], cp)) {
        cps[starter] = composite;
        continue;
      }
    }
    if (cls == 0) {
      starter = kept;
      last_class = -1;
    } else {
      last_class = cls;
    }
    cps[kept++] = cp;
  }
  cps.resize(kept);
}

// Appends the NFC form of a well-formed stretch.
void normalizeStretch(const NfcTables& tables, std::string_view stretch, std::string& out) {
  std::vector<char32_t> cps;
  for (size_t pos = 0; pos < stretch.size();) {
    char32_t cp = 0;
    pos += decodeUtf8(stretch, pos, &cp);
    tables.decompose(cp, cps);
  }
  // Canonical ordering: each run of non-starters sorted by class, stably.
  for (size_t i = 1; i < cps.size(); ++i) {
    const uint8_t cls = tables.combiningClass(cps[i]);
    for (size_t j = i; cls != 0 && j > 0 && tables.combiningClass(cps[j - 1]) > cls; --j) std::swap(cps[j - 1], cps[j]);
  }
  composeInPlace(tables, cps);
  for (char32_t cp : cps) appendUtf8(cp, out);
}

}  // namespace

void appendNfc(std::string_view text, std::string& out) {
  const NfcTables& tables = NfcTables::get();
  size_t copied = 0;    // text[0, copied) is in `out`
  size_t boundary = 0;  // where a stretch to normalize may start: at the last stable starter
  size_t pos = 0;
  // The length of the character at `at` (0 for a byte that is not UTF-8)
  // and whether it is stable.
  const auto next = [&](size_t at, bool& stable) -> size_t {
    stable = true;
    if (static_cast<unsigned char>(text[at]) < 0x80) return 1;
    char32_t cp = 0;
    const size_t length = decodeUtf8(text, at, &cp);
    if (length != 0) stable = !tables.unstable(cp);
    return length;
  };
  while (pos < text.size()) {
    bool stable = false;
    const size_t length = next(pos, stable);
    if (length == 0) {  // not UTF-8: nothing normalizes across it
      boundary = ++pos;
      continue;
    }
    if (stable) {
      boundary = pos;
      pos += length;
      continue;
    }
    size_t end = pos + length;
    while (end < text.size()) {
      bool next_stable = false;
      const size_t n = next(end, next_stable);
      if (n == 0 || next_stable) break;
      end += n;
    }
    out.append(text.substr(copied, boundary - copied));
    normalizeStretch(tables, text.substr(boundary, end - boundary), out);
    copied = boundary = pos = end;
  }
  out.append(text.substr(copied));
}

}  // namespace dtrain::data
