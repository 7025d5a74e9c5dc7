// StragglerDetector: which rank is slower than the others, window after
// window (private to train/; torch-free, so its test needs no processes).
//
// Contract:
// - observe() takes one window: each rank's compute time (the median of
//   its steps in the window, seconds), the same vector on every rank. It
//   returns the window's verdict; every rank computes the same one from the
//   same vector, so the ranks agree without another collective.
// - A rank's ratio is its time over the median of all ranks' times (for an
//   even count, the mean of the middle two). The rank is slow in the window
//   when ratio >= 1 + threshold. A rank slow in `patience` consecutive
//   windows is flagged (newly_flagged lists it in that window only); a
//   window at normal speed resets its count, and a flagged rank that has
//   one is unflagged (recovered lists it).
// - A window whose median is not positive (nothing measured) changes no
//   count and flags nobody; its ratios are 1.
// - ConfigError when the ranks are fewer than 1, the threshold is not
//   above 0, patience < 1, or a window's vector has the wrong size.
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain {

// The median of `values` (the mean of the middle two for an even count);
// 0 for none.
double medianOf(std::vector<double> values);

struct StragglerVerdict {
  int64_t window = 0;                 // 0-based index of the window
  double median_s = 0;                // the median of the ranks' times
  std::vector<double> ratio;          // per rank: its time / median_s
  std::vector<int64_t> slow_windows;  // per rank: consecutive slow windows, this one included
  std::vector<int> newly_flagged;     // ranks flagged in this window
  std::vector<int> recovered;         // flagged ranks back to normal in this window
};

class StragglerDetector {
 public:
  StragglerDetector(int ranks, double threshold, int64_t patience);

  StragglerVerdict observe(const std::vector<double>& seconds_per_rank);
  bool flagged(int rank) const { return flagged_.at(static_cast<size_t>(rank)) != 0; }
  int ranks() const { return ranks_; }

 private:
  int ranks_;
  double threshold_;
  int64_t patience_;
  int64_t windows_ = 0;
  std::vector<int64_t> slow_;
  std::vector<char> flagged_;
};

}  // namespace dtrain
