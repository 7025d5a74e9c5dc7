#include "exporter/gpu_monitor.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log.h"
#include "common/system_root.h"
#include "exporter/gpu_metrics.h"

namespace dtrain::exporter {
namespace {

using Json = nlohmann::json;

constexpr auto kNvmlRetryInterval = std::chrono::seconds(30);
// The history's memory bound: 2 hours at 1 s, about 40 MiB for 8 GPUs.
constexpr int64_t kMaxHistorySamples = 7200;

constexpr const char* kNvmlAvailable = "dtrain_exporter_nvml_available";
constexpr const char* kNvmlAvailableHelp = "1 when NVML is loaded and initialized, else 0 (no GPU metrics).";

const std::vector<MetricInfo>& exporterCatalog() {
  static const std::vector<MetricInfo> catalog = {
      {kNvmlAvailable, kNvmlAvailableHelp, metrics::MetricType::kGauge},
      {"dtrain_exporter_gpus", "GPUs the exporter reads through NVML.", metrics::MetricType::kGauge},
      {"dtrain_exporter_collections_total", "Collections of every GPU's readings since the exporter started.",
       metrics::MetricType::kCounter},
      {"dtrain_exporter_collection_duration_seconds", "Seconds the last collection of every GPU's readings took.",
       metrics::MetricType::kGauge},
      {"dtrain_exporter_last_collection_timestamp_seconds", "Unix time of the last collection.", metrics::MetricType::kGauge},
  };
  return catalog;
}

Json optionalJson(const std::optional<double>& value) { return value ? Json(*value) : Json(nullptr); }

Json gpuJson(const GpuSample& s) {
  Json xids = Json::object();
  for (const auto& [xid, count] : s.xid_counts) xids[std::to_string(xid)] = count;
  Json owners = Json::array();
  for (const GpuOwner& owner : s.owners) {
    owners.push_back(Json{{"hpc_job", owner.hpc_job.empty() ? Json(nullptr) : Json(owner.hpc_job)},
                          {"pod_uid", owner.pod_uid.empty() ? Json(nullptr) : Json(owner.pod_uid)}});
  }
  Json clock_events = nullptr;
  if (s.clock_event_reasons) {
    clock_events = activeClockEventReasons(static_cast<unsigned long long>(*s.clock_event_reasons));
  }
  return Json{
      {"t", static_cast<double>(s.time_ms) / 1000.0},
      {"gpu", s.id.gpu},
      {"uuid", s.id.uuid},
      {"name", s.id.model},
      {"pci_bus_id", s.id.pci_bus_id},
      {"device", s.id.device},
      {"util", optionalJson(s.gpu_util)},
      {"mem_copy_util", optionalJson(s.mem_copy_util)},
      {"mem_used_mib", optionalJson(s.fb_used_mib)},
      {"mem_free_mib", optionalJson(s.fb_free_mib)},
      {"mem_total_mib", optionalJson(s.fb_total_mib)},
      {"temp_c", optionalJson(s.gpu_temp_c)},
      {"mem_temp_c", optionalJson(s.memory_temp_c)},
      {"power_w", optionalJson(s.power_w)},
      {"energy_mj", optionalJson(s.energy_mj)},
      {"sm_clock_mhz", optionalJson(s.sm_clock_mhz)},
      {"mem_clock_mhz", optionalJson(s.mem_clock_mhz)},
      {"clock_event_reasons", optionalJson(s.clock_event_reasons)},
      {"clock_events", clock_events},
      {"pcie_replays", optionalJson(s.pcie_replays)},
      {"ecc_dbe_volatile", optionalJson(s.ecc_dbe_volatile)},
      {"row_remap_pending", optionalJson(s.row_remap_pending)},
      {"row_remap_failure", optionalJson(s.row_remap_failure)},
      {"nvlink_tx_bytes", optionalJson(s.nvlink_tx_bytes)},
      {"nvlink_rx_bytes", optionalJson(s.nvlink_rx_bytes)},
      {"last_xid", optionalJson(s.last_xid)},
      {"xid_events", s.last_xid ? xids : Json(nullptr)},
      {"sm_active", optionalJson(s.sm_active)},
      {"sm_occupancy", optionalJson(s.sm_occupancy)},
      {"tensor_active", optionalJson(s.tensor_active)},
      {"dram_active", optionalJson(s.dram_active)},
      {"pcie_tx_bytes_per_s", optionalJson(s.pcie_tx_bytes_per_s)},
      {"pcie_rx_bytes_per_s", optionalJson(s.pcie_rx_bytes_per_s)},
      {"nvlink_tx_bytes_per_s", optionalJson(s.nvlink_tx_bytes_per_s)},
      {"nvlink_rx_bytes_per_s", optionalJson(s.nvlink_rx_bytes_per_s)},
      {"owners", owners},
  };
}

double seconds(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }

}  // namespace

namespace {
// The CLI refuses these already; a library caller is held to the same, since
// a zero interval would make the collection thread spin.
MonitorOptions checked(MonitorOptions options) {
  if (options.interval.count() <= 0) {
    throw ConfigError("exporter interval " + std::to_string(options.interval.count()) +
                      " ms: expected at least 1 ms");
  }
  if (options.slow_interval.count() < 0 || options.history.count() <= 0) {
    throw ConfigError("exporter slow interval " + std::to_string(options.slow_interval.count()) + " ms, history " +
                      std::to_string(options.history.count()) + " s: expected a slow interval >= 0 and a history >= 1 s");
  }
  SystemRoot root(options.system_root);  // a missing directory: ConfigError naming it, now rather than at NVML's open
  return options;
}
}  // namespace

GpuMonitor::GpuMonitor(MonitorOptions options)
    : options_(checked(options)),
      capacity_(static_cast<size_t>(std::clamp<int64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(options.history).count() /
              std::max<int64_t>(1, options.interval.count()),
          1, kMaxHistorySamples))),
      host_labels_(hostLabels()) {
  std::lock_guard<std::mutex> lock(collect_mutex_);
  tryOpenNvml();
}

GpuMonitor::~GpuMonitor() { stop(); }

void GpuMonitor::tryOpenNvml() {
  last_open_attempt_ = std::chrono::steady_clock::now();
  std::string error;
  try {
    nvml_ = gpu::Nvml::open();
    collector_ = std::make_unique<GpuCollector>(*nvml_, options_.slow_interval, SystemRoot(options_.system_root));
    DTRAIN_LOG_INFO("NVML " << nvml_->libraryName() << ": " << collector_->gpus().size() << " GPU(s)");
  } catch (const Error& e) {
    collector_.reset();
    nvml_.reset();
    error = e.message();
  }
  bool first_failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    first_failure = !error.empty() && nvml_error_.empty();
    nvml_error_ = error;
  }
  if (first_failure) DTRAIN_LOG_WARN("GPU metrics unavailable: " << error);
}

void GpuMonitor::collectOnce() {
  std::lock_guard<std::mutex> collect_lock(collect_mutex_);
  if (!nvml_ && std::chrono::steady_clock::now() - last_open_attempt_ >= kNvmlRetryInterval) tryOpenNvml();
  auto started = std::chrono::steady_clock::now();
  auto snapshot = std::make_shared<MonitorSnapshot>();
  if (collector_) snapshot->gpus = collector_->collect();
  snapshot->time_ms = unixMillis();
  double duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ++collections_;

  std::vector<metrics::MetricFamily> families = exporterFamilies(snapshot->gpus.size(), duration_s, snapshot->time_ms);
  std::vector<metrics::MetricFamily> gpu_families = gpuMetricFamilies(snapshot->gpus, host_labels_);
  families.insert(families.end(), gpu_families.begin(), gpu_families.end());
  snapshot->metrics_text = metrics::render(families);

  Json gpus = Json::array();
  for (const GpuSample& sample : snapshot->gpus) gpus.push_back(gpuJson(sample));
  snapshot->gpus_json = gpus.dump();
  std::string entry = Json{{"t", static_cast<double>(snapshot->time_ms) / 1000.0}, {"gpus", gpus}}.dump();

  std::lock_guard<std::mutex> lock(mutex_);
  latest_ = std::move(snapshot);
  history_.emplace_back(latest_->time_ms, std::move(entry));
  while (history_.size() > capacity_) history_.pop_front();
}

std::vector<metrics::MetricFamily> GpuMonitor::exporterFamilies(size_t gpu_count, double duration_s, int64_t time_ms) const {
  std::string error = nvmlError();
  std::vector<metrics::MetricFamily> families;
  for (const MetricInfo& info : exporterCatalog()) {
    // The reason NVML is missing goes where a scrape's reader will see it.
    std::string help = info.name == kNvmlAvailable && !error.empty() ? info.help + " " + error : info.help;
    families.emplace_back(info.name, help, info.type);
  }
  families[0].add({}, error.empty() ? 1 : 0);
  families[1].add({}, static_cast<double>(gpu_count));
  families[2].add({}, static_cast<double>(collections_));
  families[3].add({}, duration_s);
  families[4].add({}, static_cast<double>(time_ms) / 1000.0);
  return families;
}

void GpuMonitor::start() {
  collectOnce();
  std::lock_guard<std::mutex> lock(mutex_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
}

void GpuMonitor::run() {
  auto next = std::chrono::steady_clock::now() + options_.interval;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (wake_.wait_until(lock, next, [this] { return stopping_; })) return;
    }
    try {
      collectOnce();
    } catch (const std::exception& e) {
      DTRAIN_LOG_ERROR("GPU collection failed: " << e.what());
    }
    next += options_.interval;
    // A collection slower than the interval: skip the missed ticks.
    auto now = std::chrono::steady_clock::now();
    if (next < now) next = now + options_.interval;
  }
}

void GpuMonitor::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<const MonitorSnapshot> GpuMonitor::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (latest_) return latest_;
  static const auto empty = std::make_shared<const MonitorSnapshot>(MonitorSnapshot{0, {}, "", "[]"});
  return empty;
}

std::string GpuMonitor::historyJson(double since_s) const {
  const double since_ms = since_s * 1000.0;
  std::string samples;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [time_ms, entry] : history_) {
      if (static_cast<double>(time_ms) <= since_ms) continue;
      if (!samples.empty()) samples += ',';
      samples += entry;
    }
  }
  Json head{{"interval_s", seconds(options_.interval)},
            {"history_s", options_.history.count()},
            {"capacity", capacity_}};
  std::string out = head.dump();
  out.pop_back();  // the closing brace: the samples follow, already rendered
  return out + ",\"samples\":[" + samples + "]}";
}

std::string GpuMonitor::statusJson() const {
  auto snapshot = latest();
  std::string error = nvmlError();
  Json status{{"hostname", host_labels_.front().second},
              {"slurm_job_id", nullptr},
              {"nvml_available", error.empty()},
              {"nvml_error", error.empty() ? Json(nullptr) : Json(error)},
              {"nvml_library", gpu::nvmlLibraryName()},
              {"gpu_count", snapshot->gpus.size()},
              {"interval_s", seconds(options_.interval)},
              {"history_s", options_.history.count()},
              {"t", static_cast<double>(snapshot->time_ms) / 1000.0}};
  for (const auto& [name, value] : host_labels_) {
    if (name == "slurm_job_id") status["slurm_job_id"] = value;
  }
  return status.dump();
}

bool GpuMonitor::nvmlAvailable() const { return nvmlError().empty(); }

std::string GpuMonitor::nvmlError() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return nvml_error_;
}

std::vector<std::string> GpuMonitor::metricNames() {
  std::vector<std::string> names;
  for (const MetricInfo& info : exporterCatalog()) names.push_back(info.name);
  for (const MetricInfo& info : gpuMetricCatalog()) names.push_back(info.name);
  return names;
}

}  // namespace dtrain::exporter
