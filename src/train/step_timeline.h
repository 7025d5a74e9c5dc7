// StepTimeline (`dtrain train --timeline FILE`): a Chrome trace (the Trace
// Event Format that chrome://tracing and Perfetto read) of a window of
// training steps. It observes the loop (TrainObserver: data waits, step
// boundaries) and the step (StepObserver: phases), and reads the buckets'
// all-reduce times from a BucketTimer. (private to train/)
//
// Contract:
// - One process row per rank ("rank N"), with three threads: "compute"
//   (forward, backward and optimizer of an eager step, or the replayed CUDA
//   graph as one span; a pipeline stage's rank shows each of its actions'
//   forward or backward and, between them, "pipeline wait": its bubble), "comm" (each gradient bucket's all-reduce, eager
//   steps only: inside a graph the all-reduces are graph nodes) and "data"
//   (the host waiting for the next batch).
// - Only steps [first_step, first_step + steps) are recorded; each of them
//   waits for the GPU once at its end to read its CUDA events, the others
//   cost nothing.
// - Times are microseconds of the system clock, so ranks on one host line
//   up exactly and ranks on several hosts as well as their clocks agree. On
//   CUDA they come from events measured against an anchor event taken at
//   construction.
// - write(): every rank writes FILE.rank<N>, then (after a barrier) rank 0
//   merges the parts it can see into FILE, atomically, and removes them; a
//   part it cannot see (another host without a shared filesystem) is named
//   in the returned note.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "dtrain/init.h"
#include "train/bucket_timer.h"
#include "train/train_observer.h"
#include "train/train_step.h"

namespace dtrain {

class StepTimeline : public TrainObserver, public StepObserver {
 public:
  // `buckets`: where the all-reduce times come from (nullptr: none).
  StepTimeline(torch::Device device, int rank, int64_t first_step, int64_t steps, const BucketTimer* buckets);
  ~StepTimeline() override;
  StepTimeline(const StepTimeline&) = delete;
  StepTimeline& operator=(const StepTimeline&) = delete;

  bool wants(int64_t step) const { return step >= first_step_ && step < first_step_ + steps_; }
  // Starts recording step `step` (if wanted); phases go to it until it finishes.
  void stepStarting(int64_t step, int64_t samples) override;
  // A phase boundary on the compute thread, queued on the current stream:
  // the span named `phase` starts here and the previous one ends. "end"
  // only ends the previous one.
  void phase(const char* name) override;
  // The host waited for the batch of step `step` from begin to end.
  void dataWaited(int64_t step, Clock::time_point begin, Clock::time_point end) override;
  // Resolves the step's marks (waiting for the GPU) and, for an eager step,
  // the last backward's bucket all-reduces.
  void stepFinished(int64_t step, bool graphed) override;

  // This rank's events (Trace Event Format objects).
  const nlohmann::json& events() const { return events_; }
  // Every rank: see the contract. Returns rank 0's note ("timeline: FILE",
  // or which parts were missing); "" on the other ranks. IoError when FILE
  // cannot be written.
  std::string write(const std::string& path, Context& ctx) const;

 private:
  void writePart(const std::string& path) const;
  static std::string merge(const std::string& path, int world_size);
  struct Mark;
  double toUnixUs(const Mark& mark) const;
  void span(const std::string& name, int tid, double begin_us, double end_us, int64_t step,
            nlohmann::json args = nlohmann::json::object());

  torch::Device device_;
  const BucketTimer* buckets_;
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
