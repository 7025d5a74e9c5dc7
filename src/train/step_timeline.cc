#include "train/step_timeline.h"

#include <cstdio>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "common/error.h"

#if DTRAIN_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace dtrain {
namespace {

constexpr int kComputeThread = 0, kCommThread = 1, kDataThread = 2;

double nowUnixUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double steadyUs(StepTimeline::Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

std::string partPath(const std::string& path, int rank) { return path + ".rank" + std::to_string(rank); }

}  // namespace

struct StepTimeline::Mark {
  Clock::time_point host;
#if DTRAIN_TORCH_CUDA
  std::shared_ptr<at::cuda::CUDAEvent> event;
#endif
};

StepTimeline::StepTimeline(torch::Device device, int rank, int64_t first_step, int64_t steps,
                           const BucketTimer* buckets)
    : device_(device), buckets_(buckets), rank_(rank), first_step_(first_step), steps_(steps) {
  if (first_step < 0 || steps < 1) {
    throw ConfigError("--timeline-steps must be >= 1 and the first step >= 0 (got " + std::to_string(steps) +
                      " from step " + std::to_string(first_step) + ")");
  }
  steady_to_unix_us_ = nowUnixUs() - steadyUs(Clock::now());
#if DTRAIN_TORCH_CUDA
  if (device_.is_cuda()) {
    auto anchor = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);
    anchor->record(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_.index())));
    anchor->synchronize();
    anchor_unix_us_ = nowUnixUs();
    anchor_ = anchor;
  }
#endif
  const std::string process = "rank " + std::to_string(rank_);
  events_.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank_}, {"args", {{"name", process}}}});
  events_.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank_}, {"args", {{"sort_index", rank_}}}});
  for (auto [tid, name] : {std::pair{kComputeThread, "compute"}, std::pair{kCommThread, "comm (all-reduce)"},
                           std::pair{kDataThread, "data"}}) {
    events_.push_back(
        {{"ph", "M"}, {"name", "thread_name"}, {"pid", rank_}, {"tid", tid}, {"args", {{"name", name}}}});
  }
}

StepTimeline::~StepTimeline() = default;

void StepTimeline::stepStarting(int64_t step, int64_t /*samples*/) {
  in_step_ = wants(step);
  step_ = step;
  marks_.clear();
}

void StepTimeline::phase(const char* phase) {
  if (!in_step_) return;
  auto m = std::make_shared<Mark>();
  m->host = Clock::now();
#if DTRAIN_TORCH_CUDA
  if (device_.is_cuda()) {
    m->event = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);
    m->event->record(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_.index())));
  }
#endif
  marks_.emplace_back(phase, std::move(m));
}

double StepTimeline::toUnixUs(const Mark& mark) const {
#if DTRAIN_TORCH_CUDA
  if (mark.event) {
    auto* anchor = static_cast<at::cuda::CUDAEvent*>(anchor_.get());
    mark.event->synchronize();
    return anchor_unix_us_ + 1000.0 * anchor->elapsed_time(*mark.event);
  }
#endif
  return steadyUs(mark.host) + steady_to_unix_us_;
}

void StepTimeline::span(const std::string& name, int tid, double begin_us, double end_us, int64_t step,
                        nlohmann::json args) {
  args["step"] = step;
  events_.push_back({{"ph", "X"},
                     {"name", name},
                     {"pid", rank_},
                     {"tid", tid},
                     {"ts", begin_us},
                     {"dur", std::max(0.0, end_us - begin_us)},
                     {"args", std::move(args)}});
}

void StepTimeline::dataWaited(int64_t step, Clock::time_point begin, Clock::time_point end) {
  if (!wants(step)) return;
  span("data wait", kDataThread, steadyUs(begin) + steady_to_unix_us_, steadyUs(end) + steady_to_unix_us_, step);
}

void StepTimeline::stepFinished(int64_t /*step*/, bool graphed) {
  if (!in_step_) return;
  in_step_ = false;
  for (size_t i = 0; i + 1 < marks_.size(); ++i) {
    if (marks_[i].first == "end") continue;
    span(marks_[i].first, kComputeThread, toUnixUs(*marks_[i].second), toUnixUs(*marks_[i + 1].second), step_);
  }
  if (graphed || buckets_ == nullptr || buckets_->backwards() == 0) return;
  double zero_us = 0;
  BackwardTimeline timeline;
#if DTRAIN_TORCH_CUDA
  if (device_.is_cuda()) {
    timeline = buckets_->last(static_cast<at::cuda::CUDAEvent*>(anchor_.get())->event());
    zero_us = anchor_unix_us_;
  }
#endif
  if (!device_.is_cuda()) {
    timeline = buckets_->last();
    zero_us = steadyUs(timeline.first_ready) + steady_to_unix_us_;
  }
  for (size_t b = 0; b < timeline.buckets.size(); ++b) {
    const auto& t = timeline.buckets[b];
    span("all-reduce bucket " + std::to_string(b), kCommThread, zero_us + 1000.0 * t.start_ms,
         zero_us + 1000.0 * t.end_ms, step_, {{"bytes", t.bytes}, {"ready_us", zero_us + 1000.0 * t.ready_ms}});
  }
}

std::string StepTimeline::write(const std::string& path, Context& ctx) const {
  writePart(path);
  ctx.barrier();
  if (!ctx.isMain()) return "";
  const std::string note = merge(path, ctx.size());
  return note.empty() ? "timeline: " + path : note;
}

void StepTimeline::writePart(const std::string& path) const {
  const std::string part = partPath(path, rank_);
  std::ofstream out(part);
  out << events_.dump() << "\n";
  if (!out) throw IoError("--timeline: cannot write " + part);
}

std::string StepTimeline::merge(const std::string& path, int world_size) {
  nlohmann::json all = nlohmann::json::array();
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    std::ifstream in(partPath(path, r));
    if (!in) {
      missing.push_back(r);
      continue;
    }
    for (auto& e : nlohmann::json::parse(in)) all.push_back(std::move(e));
    std::remove(partPath(path, r).c_str());
  }
  nlohmann::json trace{{"traceEvents", std::move(all)}, {"displayTimeUnit", "ms"},
                       {"otherData", {{"producer", "dtrain train --timeline"}, {"ranks", world_size}}}};
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << trace.dump() << "\n";
    if (!out) {
      std::remove(tmp.c_str());
      throw IoError("--timeline: cannot write " + tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());  // nothing left behind
    throw errnoError("rename", err, "--timeline: cannot rename " + tmp + " to " + path);
  }
  if (missing.empty()) return "";
  std::ostringstream note;
  note << "--timeline: no part from rank(s)";
  for (int r : missing) note << " " << r;
  note << " (on another host without a shared filesystem? their " << path << ".rank<N> files stay there)";
  return note.str();
}

}  // namespace dtrain
