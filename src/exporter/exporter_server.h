// `dtrain exporter`'s HTTP side (cpp-httplib), read-only:
//
//   GET /metrics      Prometheus text 0.0.4 (the latest collection)
//   GET /healthz      "ok"
//   GET /             the live page (exporter/live_page/)
//   GET /api/gpus     JSON array, one object per GPU, the latest readings
//   GET /api/history  JSON ring buffer of the last 10 minutes; ?since=<unix s>
//   GET /api/status   JSON: host, NVML availability and why not, interval
//   GET /api/jobs     JSON array: the training jobs' status files (job_status.h);
//                     files it may not read are logged at info level, each once
//
// Unknown paths answer 404, other methods 405. Scrapes never call NVML
// (gpu_monitor.h).
//
// Slow, huge and malformed clients cannot starve the scrapes:
// - A connection's request is read by one epoll thread (request_intake.h),
//   not by a worker: a client that sends a byte a second costs a descriptor
//   and a buffer, never a thread. The whole request (head and body) must
//   arrive within `request_deadline` of accept, or the client gets 408 and
//   is dropped. httplib's own timeouts apply per recv(), so a byte every
//   few seconds would hold its worker forever; and with a fixed pool, 16
//   such clients (the pool's size) once stopped every scrape.
// - Only whole requests reach the fixed pool of `worker_threads`, which
//   answers each in well under a millisecond and has `response_deadline`
//   to send it; then the connection is closed (one request per
//   connection: Prometheus scrapes far less often than any keep-alive
//   would last, and a kept-alive connection would wait on a worker again).
// - At most `max_pending_connections` (further capped by the descriptor
//   limit) are held while their requests are read; to admit another the
//   oldest is answered 503 and dropped. A scrape's request arrives within
//   a millisecond of its connect, so under a flood of thousands of slow
//   clients the ones dropped are theirs, and scrapes keep being answered.
// Chosen over a larger or elastic pool (threads still bound by the number
// of clients), a per-peer cap (behind a NAT or a proxy, as on loopback, the
// attacker and Prometheus share one address), and a reaper shutting down
// sockets that httplib's workers own (racing the worker's close() and the
// kernel's reuse of the descriptor number).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "exporter/gpu_monitor.h"

namespace httplib {
class Server;
class ThreadPool;
}

namespace dtrain::exporter {

class RequestIntake;

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
  // From accept to the last byte of the request.
  std::chrono::milliseconds request_deadline{5000};
  // From the request read to the last byte of the response.
  std::chrono::milliseconds response_deadline{10000};
  size_t max_pending_connections = 1024;
};

class ExporterServer {
 public:
  ExporterServer(GpuMonitor& monitor, ExporterServerOptions options);
  ~ExporterServer();  // stop()
  ExporterServer(const ExporterServer&) = delete;
  ExporterServer& operator=(const ExporterServer&) = delete;

  // Binds (IoError when the address is taken or not local) and serves on
  // background threads. Returns the bound port.
  int start();
  void stop();

 private:
  void routes();
  void serve(int fd, std::string request);
  void reportUnreadableJobs(const std::vector<std::string>& unreadable);

  GpuMonitor& monitor_;
  ExporterServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::unique_ptr<httplib::ThreadPool> workers_;
  std::unique_ptr<RequestIntake> intake_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
  std::mutex reported_mutex_;
  std::set<std::string> reported_jobs_;  // guarded by reported_mutex_
};

}  // namespace dtrain::exporter
