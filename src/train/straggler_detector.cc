#include "train/straggler_detector.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace dtrain {

double medianOf(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

StragglerDetector::StragglerDetector(int ranks, double threshold, int64_t patience)
    : ranks_(ranks), threshold_(threshold), patience_(patience) {
  if (ranks < 1) throw ConfigError("StragglerDetector: ranks must be >= 1, got " + std::to_string(ranks));
  if (!(threshold > 0)) {
    throw ConfigError("--straggler-threshold " + std::to_string(threshold) + ": expected a number above 0");
  }
  if (patience < 1) throw ConfigError("--straggler-patience " + std::to_string(patience) + ": expected >= 1");
  slow_.assign(static_cast<size_t>(ranks), 0);
  flagged_.assign(static_cast<size_t>(ranks), 0);
}

StragglerVerdict StragglerDetector::observe(const std::vector<double>& seconds) {
  if (seconds.size() != static_cast<size_t>(ranks_)) {
    throw ConfigError("StragglerDetector: a window of " + std::to_string(seconds.size()) + " times for " +
                      std::to_string(ranks_) + " ranks");
  }
  StragglerVerdict v;
  v.window = windows_++;
  v.median_s = medianOf(seconds);
  v.ratio.assign(seconds.size(), 1.0);
  if (v.median_s > 0) {
    for (size_t r = 0; r < seconds.size(); ++r) {
      v.ratio[r] = seconds[r] / v.median_s;
      const bool slow = v.ratio[r] >= 1 + threshold_;
      slow_[r] = slow ? slow_[r] + 1 : 0;
      if (slow && !flagged_[r] && slow_[r] >= patience_) {
        flagged_[r] = 1;
        v.newly_flagged.push_back(static_cast<int>(r));
      } else if (!slow && flagged_[r]) {
        flagged_[r] = 0;
        v.recovered.push_back(static_cast<int>(r));
      }
    }
  }
  v.slow_windows = slow_;
  return v;
}

}  // namespace dtrain
