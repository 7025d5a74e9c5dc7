#include "exporter/exporter_server.h"

#include <httplib.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

#include "common/error.h"
#include "common/log.h"
#include "common/socket.h"
#include "exporter/deadline_stream.h"
#include "exporter/live_page/live_page.h"
#include "exporter/request_intake.h"
#include "metrics/job_status.h"
#include "metrics/prometheus_text.h"

namespace dtrain::exporter {
namespace {

constexpr const char* kJson = "application/json";
constexpr const char* kText = "text/plain; charset=utf-8";
constexpr const char* kHtml = "text/html; charset=utf-8";

// A body (never wanted: the server is read-only) is refused past 64 KiB;
// the request line and header lines are capped at 8 KiB by httplib itself
// (414, 400 beyond), so the intake hands a head over once it passes 16 KiB.
constexpr size_t kPayloadMaxBytes = 64 * 1024;
constexpr size_t kHeadMaxBytes = 16 * 1024;
constexpr int kListenBacklog = 1024;
// Descriptors kept free for the rest of the process (NVML, the jobs
// directory, logs) besides one per worker.
constexpr size_t kReservedDescriptors = 64;
// Lines about unreadable job status files remembered so that each is
// logged once; a directory churning new names cannot grow the set forever.
constexpr size_t kMaxReportedJobLines = 1024;

// httplib runs process_and_close_socket() of each accepted socket on a task
// queue; this one runs it at once on the accept thread, where HttpServer
// passes the socket to the intake instead of reading from it.
class InlineTaskQueue final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> task) override { task(); }
  void shutdown() override {}
};

class HttpServer final : public httplib::Server {
 public:
  explicit HttpServer(std::function<void(int)> accepted) : accepted_(std::move(accepted)) {}

  // httplib listens with a backlog of 5, compiled into Debian's library: in
  // a burst of connections (a dashboard reload, a fleet of scrapers) each
  // one beyond it waits a 1 s SYN retransmit. Listening again on the bound
  // socket raises it.
  void raiseBacklog(int backlog) { setListenBacklog(svr_sock_.load(), backlog); }

  // Answers the one request `stream` holds, with "Connection: close".
  void serve(httplib::Stream& stream) {
    bool connection_closed = true;
    process_request(stream, /*close_connection=*/true, connection_closed, nullptr);
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    accepted_(sock);
    return true;
  }

  std::function<void(int)> accepted_;
};

// What the descriptor limit leaves for connections being read.
size_t descriptorRoom(size_t workers) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  size_t reserved = kReservedDescriptors + workers;
  return limit.rlim_cur > reserved + 16 ? limit.rlim_cur - reserved : 16;
}

const char* reasonPhrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 500: return "Internal Server Error";
    default: return "Error";
  }
}

}  // namespace

ListenAddress parseListenAddress(const std::string& text) {
  auto fail = [&text](const std::string& why) -> ListenAddress {
    throw ConfigError("--listen '" + text + "': " + why + "; expected :PORT, HOST:PORT or [IPV6]:PORT");
  };
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) return fail("no port");
  std::string host = text.substr(0, colon);
  std::string port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return fail("an IPv6 address needs brackets");
  }
  if (host.empty()) host = "0.0.0.0";
  int port = -1;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port < 0 ||
      port > 65535) {
    return fail("port '" + port_text + "' is not in 0..65535");
  }
  return ListenAddress{host, port};
}

ExporterServer::ExporterServer(GpuMonitor& monitor, ExporterServerOptions options)
    : monitor_(monitor),
      options_(std::move(options)),
      server_(std::make_unique<HttpServer>([this](int fd) { intake_->add(fd); })) {
  server_->new_task_queue = [] { return new InlineTaskQueue(); };
  server_->set_payload_max_length(kPayloadMaxBytes);
  // httplib's default adds SO_REUSEPORT, with which a second exporter would
  // share the port silently; SO_REUSEADDR alone still allows a quick restart.
  server_->set_socket_options([](int sock) { setReuseAddress(sock); });
  routes();
}

ExporterServer::~ExporterServer() { stop(); }

void ExporterServer::routes() {
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(monitor_.latest()->metrics_text, metrics::kPrometheusContentType);
  });
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", kText); });
  server_->Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(livePageHtml(), kHtml); });
  server_->Get("/api/gpus", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(monitor_.latest()->gpus_json, kJson);
  });
  server_->Get("/api/history", [this](const httplib::Request& req, httplib::Response& res) {
    double since = 0;
    if (req.has_param("since")) {
      std::string text = req.get_param_value("since");
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), since);
      if (ec != std::errc() || end != text.data() + text.size()) {
        res.status = 400;
        res.set_content("since must be a Unix time in seconds\n", kText);
        return;
      }
    }
    res.set_content(monitor_.historyJson(since), kJson);
  });
  server_->Get("/api/status", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(monitor_.statusJson(), kJson);
  });
  server_->Get("/api/jobs", [this](const httplib::Request&, httplib::Response& res) {
    metrics::JobList jobs = metrics::listJobs(metrics::jobsDirectory());
    reportUnreadableJobs(jobs.unreadable);
    res.set_content(jobs.json, kJson);
  });

  // Read-only: every other method is refused on every path.
  auto refuse = [](const httplib::Request&, httplib::Response& res) {
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_content("405 Method Not Allowed: this exporter is read-only (GET, HEAD)\n", kText);
  };
  server_->Post(".*", refuse);
  server_->Put(".*", refuse);
  server_->Patch(".*", refuse);
  server_->Delete(".*", refuse);
  server_->Options(".*", refuse);

  server_->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) {
      res.set_content(std::to_string(res.status) + " " + reasonPhrase(res.status) + "\n", kText);
    }
  });
  server_->set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr error) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    DTRAIN_LOG_ERROR("exporter: " << req.method << " " << req.path << " failed: " << what);
    res.status = 500;
    res.set_content("500 Internal Server Error\n", kText);
  });
}

int ExporterServer::start() {
  const ListenAddress& listen = options_.listen;
  int port = listen.port;
  errno = 0;
  if (port == 0) {
    port = server_->bind_to_any_port(listen.host);
  } else if (!server_->bind_to_port(listen.host, port)) {
    port = -1;
  }
  if (port < 0) {
    int err = errno;
    throw IoError("cannot listen on " + listen.host + ":" + std::to_string(listen.port) + ": " +
                  (err != 0 ? errnoString(err) : "not an address of this host"));
  }
  static_cast<HttpServer&>(*server_).raiseBacklog(kListenBacklog);
  size_t threads = static_cast<size_t>(std::max(1, options_.worker_threads));
  workers_ = std::make_unique<httplib::ThreadPool>(threads);
  RequestIntakeOptions intake_options;
  intake_options.request_deadline = options_.request_deadline;
  intake_options.max_connections = std::min(options_.max_pending_connections, descriptorRoom(threads));
  intake_options.head_max_bytes = kHeadMaxBytes;
  intake_options.body_max_bytes = kPayloadMaxBytes;
  intake_ = std::make_unique<RequestIntake>(intake_options, [this](int fd, std::string request) {
    workers_->enqueue([this, fd, request = std::move(request)]() mutable { serve(fd, std::move(request)); });
  });
  intake_->start();
  listen_returned_ = false;
  thread_ = std::thread([this] {
    if (!server_->listen_after_bind()) DTRAIN_LOG_ERROR("exporter: the HTTP server stopped accepting connections");
    listen_returned_ = true;
  });
  // httplib's stop() does nothing before its loop runs, so a stop() racing
  // this start would leave the thread serving: wait for the loop.
  while (!server_->is_running() && !listen_returned_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return port;
}

void ExporterServer::reportUnreadableJobs(const std::vector<std::string>& unreadable) {
  std::lock_guard<std::mutex> lock(reported_mutex_);
  for (const std::string& line : unreadable) {
    if (reported_jobs_.size() < kMaxReportedJobLines && reported_jobs_.insert(line).second) {
      DTRAIN_LOG_INFO("exporter: " << line);
    }
  }
}

void ExporterServer::serve(int fd, std::string request) {
  DeadlineStream stream(fd, std::move(request), std::chrono::steady_clock::now() + options_.response_deadline);
  static_cast<HttpServer&>(*server_).serve(stream);
  intake_->linger(fd);
}

void ExporterServer::stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  // The intake first, so that nothing is handed to a pool shutting down;
  // what the workers still serve is then closed without lingering.
  if (intake_) intake_->stop();
  if (workers_) workers_->shutdown();
  workers_.reset();
}

}  // namespace dtrain::exporter
