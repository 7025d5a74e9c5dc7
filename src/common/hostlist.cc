#include "common/hostlist.h"

#include <cctype>
#include <cstdint>

#include "common/error.h"

namespace dtrain {
namespace {

struct Number {
  uint64_t value;
  size_t width;  // zero-padded width, from LO as written
};

class HostlistParser {
 public:
  explicit HostlistParser(const std::string& expression) : text_(expression) {}

  std::vector<std::string> expand() {
    std::vector<std::string> hosts;
    size_t item_start = 0;
    int depth = 0;
    for (size_t i = 0; i <= text_.size(); ++i) {
      const bool end = i == text_.size();
      const char c = end ? '\0' : text_[i];
      if (c == '[') {
        if (depth > 0) fail("nested '['", i);
        ++depth;
      } else if (c == ']') {
        if (depth == 0) fail("']' without a matching '['", i);
        --depth;
      } else if (end || (depth == 0 && (c == ',' || std::isspace(static_cast<unsigned char>(c))))) {
        if (end && depth > 0) fail("'[' is never closed", text_.rfind('['));
        if (i > item_start) expandItem(item_start, i, "", hosts);
        item_start = i + 1;
      }
    }
    if (hosts.empty()) fail("no host names", 0);
    return hosts;
  }

 private:
  [[noreturn]] void fail(const std::string& what, size_t position) const {
    throw ConfigError("hostlist \"" + text_ + "\": " + what + " at position " +
                      std::to_string(position));
  }

  // Appends the names of text_[begin, end) — brackets balanced, not nested —
  // each preceded by `head`. The first bracket is the outermost loop.
  void expandItem(size_t begin, size_t end, const std::string& head, std::vector<std::string>& out) {
    size_t open = text_.find('[', begin);
    if (open == std::string::npos || open >= end) {
      // Slurm (scontrol show hostnames) rejects "tux[1-2]-ib": no text may
      // follow the last bracket group of a name.
      if (!head.empty() && begin < end) fail("text after the last ']' (Slurm allows none)", begin);
      addHost(head + text_.substr(begin, end - begin), begin, out);
      return;
    }
    size_t close = text_.find(']', open);
    std::string prefix = head + text_.substr(begin, open - begin);
    for (const Number& n : parseRanges(open + 1, close)) {
      std::string digits = std::to_string(n.value);
      if (digits.size() < n.width) digits.insert(0, n.width - digits.size(), '0');
      expandItem(close + 1, end, prefix + digits, out);
    }
  }

  void addHost(std::string host, size_t position, std::vector<std::string>& out) {
    if (out.size() >= kMaxHostlistHosts) {
      fail("expands to more than " + std::to_string(kMaxHostlistHosts) + " hosts", position);
    }
    out.push_back(std::move(host));
  }

  // The numbers of the bracket body text_[begin, end): "0-5,12".
  std::vector<Number> parseRanges(size_t begin, size_t end) const {
    if (begin == end) fail("empty brackets", begin - 1);
    std::vector<Number> numbers;
    size_t part = begin;
    while (part <= end) {
      size_t comma = text_.find(',', part);
      if (comma == std::string::npos || comma > end) comma = end;
      if (comma == part) fail("empty range", part);
      size_t dash = text_.find('-', part);
      if (dash == std::string::npos || dash > comma) dash = comma;
      const size_t width = dash - part;
      const uint64_t lo = parseNumber(part, dash);
      const uint64_t hi = dash == comma ? lo : parseNumber(dash + 1, comma);
      if (lo > hi) {
        fail("range " + text_.substr(part, comma - part) + " is reversed", part);
      }
      if (hi - lo >= kMaxHostlistHosts - numbers.size()) {
        fail("expands to more than " + std::to_string(kMaxHostlistHosts) + " hosts", part);
      }
      for (uint64_t v = lo; v <= hi; ++v) numbers.push_back({v, width});
      part = comma + 1;
    }
    return numbers;
  }

  uint64_t parseNumber(size_t begin, size_t end) const {
    if (begin == end) fail("missing number", begin);
    if (end - begin > 18) fail("number too long", begin);
    uint64_t value = 0;
    for (size_t i = begin; i < end; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(text_[i]))) {
        fail(std::string("'") + text_[i] + "' in a range (expected digits, '-' or ',')", i);
      }
      value = value * 10 + static_cast<uint64_t>(text_[i] - '0');
    }
    return value;
  }

  const std::string& text_;
};

}  // namespace

std::vector<std::string> expandHostlist(const std::string& expression) {
  return HostlistParser(expression).expand();
}

}  // namespace dtrain
