#include "exporter/exporter_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

#include "common/error.h"
#include "common/log.h"
#include "metrics/job_status.h"
#include "exporter/live_page/live_page.h"
#include "metrics/prometheus_text.h"

namespace dtrain::exporter {
namespace {

constexpr const char* kJson = "application/json";
constexpr const char* kText = "text/plain; charset=utf-8";
constexpr const char* kHtml = "text/html; charset=utf-8";

// Bounds on what one client can hold: an idle keep-alive connection frees
// its worker after 2 s, a stalled read or write after 5 s, a body (never
// wanted: the server is read-only) is cut at 64 KiB. Header lines are capped
// at 8 KiB by httplib itself (400 beyond).
constexpr time_t kKeepAliveTimeoutS = 2;
constexpr time_t kReadTimeoutS = 5;
constexpr time_t kWriteTimeoutS = 5;
constexpr size_t kPayloadMaxBytes = 64 * 1024;
constexpr int kListenBacklog = 1024;

// httplib listens with a backlog of 5, compiled into Debian's library: in a
// burst of connections (a dashboard reload, a fleet of scrapers) each one
// beyond it waits a 1 s SYN retransmit, long enough for the earlier ones to
// be dropped as idle. Listening again on the bound socket raises it.
class HttpServer final : public httplib::Server {
 public:
  void raiseBacklog(int backlog) { ::listen(svr_sock_.load(), backlog); }
};

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
    : monitor_(monitor), options_(std::move(options)), server_(std::make_unique<HttpServer>()) {
  int threads = std::max(1, options_.worker_threads);
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  server_->set_keep_alive_timeout(kKeepAliveTimeoutS);
  server_->set_read_timeout(kReadTimeoutS, 0);
  server_->set_write_timeout(kWriteTimeoutS, 0);
  server_->set_payload_max_length(kPayloadMaxBytes);
  // httplib's default adds SO_REUSEPORT, with which a second exporter would
  // share the port silently; SO_REUSEADDR alone still allows a quick restart.
  server_->set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
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
  server_->Get("/api/jobs", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics::jobsJson(metrics::jobsDirectory()), kJson);
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

void ExporterServer::stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace dtrain::exporter
