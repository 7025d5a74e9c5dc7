// `dtrain exporter`'s HTTP side (cpp-httplib), read-only:
//
//   GET /metrics      Prometheus text 0.0.4 (the latest collection)
//   GET /healthz      "ok"
//   GET /             the live page (exporter/live_page/)
//   GET /api/gpus     JSON array, one object per GPU, the latest readings
//   GET /api/history  JSON ring buffer of the last 10 minutes; ?since=<unix s>
//   GET /api/status   JSON: host, NVML availability and why not, interval
//   GET /api/jobs     JSON array: the training jobs' status files (job_status.h)
//
// Unknown paths answer 404, other methods 405. Requests are served by a
// fixed pool of threads with read/write timeouts and a header size limit, so
// a slow, huge or malformed request costs one worker for a bounded time and
// the exporter keeps serving. Scrapes never call NVML (gpu_monitor.h).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "exporter/gpu_monitor.h"

namespace httplib {
class Server;
}

namespace dtrain::exporter {

struct ListenAddress {
  std::string host;  // "0.0.0.0", "127.0.0.1", "::", a name
  int port = 0;      // 0: any free port
};

// ":9400" (all IPv4 interfaces), "HOST:PORT", "[IPV6]:PORT". ConfigError
// naming the flag otherwise.
ListenAddress parseListenAddress(const std::string& text);

struct ExporterServerOptions {
  ListenAddress listen{"0.0.0.0", 9400};
  int worker_threads = 16;
};

class ExporterServer {
 public:
  ExporterServer(GpuMonitor& monitor, ExporterServerOptions options);
  ~ExporterServer();  // stop()
  ExporterServer(const ExporterServer&) = delete;
  ExporterServer& operator=(const ExporterServer&) = delete;

  // Binds (IoError when the address is taken or not local) and serves on a
  // background thread. Returns the bound port.
  int start();
  void stop();

 private:
  void routes();

  GpuMonitor& monitor_;
  ExporterServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
};

}  // namespace dtrain::exporter
