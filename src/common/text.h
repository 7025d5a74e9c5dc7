// Small text helpers that several rooms need (one definition each, so that
// a unity build's batches never meet two of them).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain {

// `text` without leading and trailing blanks (space, tab, CR, LF).
std::string trimmed(std::string_view text);

// `parts` separated by `separator`: {"a", "b"} -> "a, b".
std::string joined(const std::vector<std::string>& parts, std::string_view separator = ", ");

// `n` and the word for that many: counted(1, "GPU") -> "1 GPU",
// counted(2, "GPU") -> "2 GPUs", counted(2, "copy", "copies") -> "2 copies".
std::string counted(int64_t n, std::string_view word);
std::string counted(int64_t n, std::string_view one, std::string_view many);

// A number as a stream writes it by default (6 significant digits, no
// trailing zeros): 0.1 -> "0.1", 1e-07 -> "1e-07".
std::string numberText(double value);

// A duration in seconds, as numberText writes them: 1500 ms -> "1.5".
std::string secondsText(std::chrono::milliseconds duration);

}  // namespace dtrain
