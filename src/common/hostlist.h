// Slurm hostlist expressions (common/): "tux[0-5,12]", "n[001-010]",
// "r[1-2]n[1-2]", "a1,b[2-3],c", as in SLURM_JOB_NODELIST.
#pragma once

#include <string>
#include <vector>

namespace dtrain {

// Expands `expression` into host names in the order `scontrol show hostnames`
// prints them:
// - Top-level items are separated by commas (or whitespace); empty items
//   are skipped. Commas inside brackets separate ranges.
// - A bracket holds comma-separated numbers or LO-HI ranges. Numbers keep the
//   width of LO ("n[001-010]" -> n001 .. n010; "n[1-010]" -> n1 .. n10).
// - Several bracket groups form the cartesian product, the first group
//   outermost ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2).
// - Duplicates are kept and nothing is sorted.
// Throws ConfigError naming the expression, what is wrong and its position
// (0-based offset) for: an empty expression, unbalanced or nested brackets,
// an empty bracket or range, a non-number in a bracket, a reversed range
// ("5-2"), or an expansion of more than kMaxHostlistHosts names.
std::vector<std::string> expandHostlist(const std::string& expression);

inline constexpr size_t kMaxHostlistHosts = 1 << 20;

}  // namespace dtrain
