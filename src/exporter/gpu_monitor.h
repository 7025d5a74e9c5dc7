// The exporter's collection side: reads every GPU on a background thread each
// interval and keeps the latest snapshot (the /metrics body and the live
// page's JSON, rendered once per collection) and a ring buffer of the last
// `history` of readings. Readers take the snapshot under a mutex and never
// touch NVML, so any number of concurrent scrapes is safe and cheap.
//
// Without NVML the monitor still runs: its /metrics says
// dtrain_exporter_nvml_available 0 with the reason in the HELP line, and it
// tries to open NVML again every 30 s (a driver loaded after the exporter).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "exporter/gpu_collector.h"
#include "gpu/nvml.h"
#include "metrics/prometheus_text.h"

namespace dtrain::exporter {

struct MonitorOptions {
  std::chrono::milliseconds interval{1000};
  // The slow readings (energy, PCIe replays, ECC, remapped rows): at most
  // this often (GpuCollector::collect()).
  std::chrono::milliseconds slow_interval{10000};
  // Kept for /api/history: history / interval samples, at most 7200.
  std::chrono::seconds history{600};
  // Where /proc is read (the owners of the GPUs' processes): "/" or a
  // fixture tree (SystemRoot).
  std::string system_root = "/";
};

struct MonitorSnapshot {
  int64_t time_ms = 0;  // Unix time of the collection; 0 before the first
  std::vector<GpuSample> gpus;
  std::string metrics_text;  // GET /metrics
  std::string gpus_json;     // GET /api/gpus: [{"t", "gpu", "uuid", "name", ...}]
};

class GpuMonitor {
 public:
  // Opens NVML; when that fails the monitor serves without GPU metrics and
  // logs "GPU metrics unavailable: ...".
  explicit GpuMonitor(MonitorOptions options);
  ~GpuMonitor();  // stop()
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Collects once, then every interval on a background thread.
  void start();
  void stop();
  // One collection into the latest snapshot and the history.
  void collectOnce();

  std::shared_ptr<const MonitorSnapshot> latest() const;
  // {"interval_s", "history_s", "capacity", "samples": [{"t", "gpus": [...]}]},
  // oldest first, with only the samples newer than since_s; t in Unix
  // seconds (ms resolution), gpus as in gpus_json.
  std::string historyJson(double since_s) const;
  // {"hostname", "slurm_job_id", "nvml_available", "nvml_error", "nvml_library",
  //  "gpu_count", "interval_s", "history_s", "t"}
  std::string statusJson() const;

  bool nvmlAvailable() const;
  std::string nvmlError() const;
  size_t historyCapacity() const { return capacity_; }

  // Every metric name the exporter can export, one family each.
  static std::vector<std::string> metricNames();

 private:
  void tryOpenNvml();
  void run();
  std::vector<metrics::MetricFamily> exporterFamilies(size_t gpu_count, double duration_s, int64_t time_ms) const;

  const MonitorOptions options_;
  const size_t capacity_;
  const metrics::Labels host_labels_;

  std::mutex collect_mutex_;  // one collection at a time
  std::unique_ptr<gpu::Nvml> nvml_;              // GUARDED_BY(collect_mutex_)
  std::unique_ptr<GpuCollector> collector_;     // GUARDED_BY(collect_mutex_)
  std::chrono::steady_clock::time_point last_open_attempt_;  // GUARDED_BY(collect_mutex_)
  uint64_t collections_ = 0;                    // GUARDED_BY(collect_mutex_)

  mutable std::mutex mutex_;
  std::string nvml_error_;                                   // GUARDED_BY(mutex_); empty when available
  std::shared_ptr<const MonitorSnapshot> latest_;            // GUARDED_BY(mutex_)
  std::deque<std::pair<int64_t, std::string>> history_;     // GUARDED_BY(mutex_); (time_ms, JSON)
  bool stopping_ = false;                                    // GUARDED_BY(mutex_)
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace dtrain::exporter
