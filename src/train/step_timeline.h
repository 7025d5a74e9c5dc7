// StepTimeline (`dtrain train --timeline FILE`): a Chrome trace (the Trace
// Event Format that chrome://tracing and Perfetto read) of a window of
// training steps.
//
// Contract:
// - One process row per rank ("rank N"), with three threads: "compute"
//   (forward, backward and optimizer of an eager step, or the replayed CUDA
//   graph as one span), "comm" (each gradient bucket's all-reduce, eager
//   steps only: inside a graph the all-reduces are graph nodes) and "data"
//   (the host waiting for the next batch).
// - Only steps [first_step, first_step + steps) are recorded; each of them
//   waits for the GPU once at its end to read its CUDA events, the others
//   cost nothing.
// - Times are microseconds of the system clock, so ranks on one host line
//   up exactly and ranks on several hosts as well as their clocks agree. On
//   CUDA they come from events measured against an anchor event taken at
//   construction.
// - writeMerged(): every rank writes FILE.rank<N>, then (after the caller's
//   barrier) rank 0 merges the parts it can see into FILE, atomically, and
//   removes them; a part it cannot see (another host without a shared
//   filesystem) is named in the returned note.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace dtrain {

class DataParallel;

class StepTimeline {
 public:
  using Clock = std::chrono::steady_clock;

  StepTimeline(torch::Device device, int rank, int64_t first_step, int64_t steps);
  ~StepTimeline();
  StepTimeline(const StepTimeline&) = delete;
  StepTimeline& operator=(const StepTimeline&) = delete;

  bool wants(int64_t step) const { return step >= first_step_ && step < first_step_ + steps_; }
  // Starts recording step `step` (if wanted); marks go to it until endStep().
  void beginStep(int64_t step);
  bool inStep() const { return in_step_; }
  // A phase boundary on the compute thread, queued on the current stream:
  // the span named `phase` starts here and the previous one ends. "end"
  // only ends the previous one.
  void mark(const std::string& phase);
  // The host waited for batch `step` from begin to end.
  void dataWait(int64_t step, Clock::time_point begin, Clock::time_point end);
  // Resolves the step's marks (waiting for the GPU) and, when
  // `with_buckets`, the last backward's bucket all-reduces from dp.
  void endStep(const DataParallel& dp, bool with_buckets);

  // This rank's events (Trace Event Format objects).
  const nlohmann::json& events() const { return events_; }
  // See the contract; call writePart() on every rank, then a barrier, then
  // merge() on rank 0. merge() returns a note ("" or which parts were
  // missing). IoError when FILE cannot be written.
  void writePart(const std::string& path) const;
  static std::string merge(const std::string& path, int world_size);

 private:
  struct Mark;
  double toUnixUs(const Mark& mark) const;
  void span(const std::string& name, int tid, double begin_us, double end_us, int64_t step,
            nlohmann::json args = nlohmann::json::object());

  torch::Device device_;
  int rank_;
  int64_t first_step_, steps_;
  int64_t step_ = -1;
  bool in_step_ = false;
  std::vector<std::pair<std::string, std::shared_ptr<Mark>>> marks_;
  double steady_to_unix_us_ = 0;  // add to a steady_clock time in us to get system-clock us
  std::shared_ptr<void> anchor_;  // CUDA: an event recorded and waited for at construction
  double anchor_unix_us_ = 0;
  nlohmann::json events_ = nlohmann::json::array();
};

}  // namespace dtrain
