// Text helpers for every test: substring checks, the message of an expected
// error, whole files and lines. Header only.
#pragma once

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace dtrain::testing {

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of the E that f() throws (Error::message() for dtrain's
// errors, what() otherwise); "" when f() returns (the input was accepted),
// and "(another exception: ...)" when it throws something else — so an
// EXPECT on the message fails with a readable value.
template <typename E = Error, typename F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const E& e) {
    if constexpr (requires { e.message(); }) {
      return e.message();
    } else {
      return e.what();
    }
  } catch (const std::exception& e) {
    return std::string("(another exception: ") + e.what() + ")";
  }
  return "";
}

template <typename F>
std::string configErrorOf(F&& f) {
  return errorOf<ConfigError>(std::forward<F>(f));
}

// The file's bytes ("" when it cannot be read).
inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Creates or truncates `path` with exactly `bytes`.
inline void writeFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream in(text);
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

}  // namespace dtrain::testing
