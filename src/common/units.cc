#include "common/units.h"

#include <cctype>
#include <limits>

#include "common/error.h"

namespace dtrain {

uint64_t parseByteSize(const std::string& text, const std::string& what) {
  auto fail = [&]() -> uint64_t {
    throw ConfigError(what + " '" + text +
                      "' is not a size; expected a whole number of bytes with an optional "
                      "K, M or G suffix (e.g. 8, 512K, 64M, 1G)");
  };
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) return fail();
    value = value * 10 + digit;
    ++i;
  }
  if (i == 0) return fail();
  uint64_t multiplier = 1;
  if (i < text.size()) {
    switch (std::toupper(static_cast<unsigned char>(text[i]))) {
      case 'K': multiplier = 1ull << 10; break;
      case 'M': multiplier = 1ull << 20; break;
      case 'G': multiplier = 1ull << 30; break;
      case 'T': multiplier = 1ull << 40; break;
      case 'B': multiplier = 1; break;
      default: return fail();
    }
    ++i;
    if (i < text.size() && multiplier != 1 && std::toupper(static_cast<unsigned char>(text[i])) == 'B') ++i;
  }
  if (i != text.size()) return fail();
  if (value > std::numeric_limits<uint64_t>::max() / multiplier) return fail();
  return value * multiplier;
}

std::string formatByteSize(uint64_t bytes) {
  static const char* kSuffix[] = {"", "K", "M", "G", "T"};
  int unit = 0;
  while (unit < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + kSuffix[unit];
}

}  // namespace dtrain
