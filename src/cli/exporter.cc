// `dtrain exporter`: GPU metrics for Prometheus under dcgm-exporter's names,
// and a live page, from one process per node (exporter/).
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/option_binding.h"
#include "common/error.h"
#include "common/log.h"
#include "exporter/gpu_monitor.h"
#if DTRAIN_WITH_EXPORTER_HTTP
#include "exporter/exporter_server.h"
#endif

namespace dtrain::cli {
namespace {

struct ExporterFlags {
  std::string listen = ":9400";
  double interval_s = 1;
  double slow_interval_s = 10;
  int history_s = 600;
  double request_deadline_s = 5;
  bool list_metrics = false;
  bool once = false;
  std::string root = "/";
};

void declareExporterOptions(OptionSet& set, ExporterFlags& f) {
  TextOption& listen =
      set.text("--listen", f.listen, "Address to serve on: :PORT (all interfaces), HOST:PORT or [IPV6]:PORT");
#if DTRAIN_WITH_EXPORTER_HTTP
  listen.check(
      [](const std::string& text) {
        exporter::parseListenAddress(text);
        return std::string();
      },
      ":PORT, HOST:PORT or [IPV6]:PORT");
#else
  (void)listen;
#endif
  set.number("--interval", f.interval_s, "Seconds between two readings of the GPUs").range(0.05, 3600).unit("seconds");
  set.number("--slow-interval", f.slow_interval_s,
             "Seconds between two readings of the costly fields: the energy counter (~4 ms of CPU per GPU), PCIe "
             "replays, ECC and remapped rows (0: every reading)")
      .range(0, 3600)
      .unit("seconds");
  set.integer("--history", f.history_s, "Seconds of readings kept for the live page (/api/history)")
      .range(1, 86400)
      .unit("seconds");
  set.number("--request-deadline", f.request_deadline_s,
             "Seconds a client has from connecting to the last byte of its request; a slower one is answered 408 "
             "and dropped")
      .range(0.1, 600)
      .unit("seconds");
  set.toggle("--list-metrics", f.list_metrics, "Print every metric name the exporter can export, and exit");
  set.toggle("--once", f.once, "Read the GPUs once, print the /metrics body, and exit");
  set.path("--root", f.root,
           "Read /proc (the Slurm job or Kubernetes pod of each GPU process) under this directory instead of /")
      .existingDirectory();
}

#if DTRAIN_WITH_EXPORTER_HTTP
// A client being read holds a descriptor, and the usual soft limit (1024)
// would cap the connections the exporter can hold below what a flood of
// slow clients needs to be shed oldest-first; the hard limit is the
// administrator's word.
void raiseDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  rlim_t wanted = std::min<rlim_t>(limit.rlim_max, 65536);
  if (limit.rlim_cur >= wanted) return;
  limit.rlim_cur = wanted;
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

// Serves until SIGINT, SIGTERM or SIGHUP. The signals are blocked before any
// thread starts and taken by sigwait here, so no handler runs inside httplib
// or NVML.
int serve(const ExporterFlags& flags, const exporter::MonitorOptions& monitor_options) {
  exporter::ExporterServerOptions server_options;
  server_options.listen = exporter::parseListenAddress(flags.listen);
  server_options.request_deadline =
      std::chrono::milliseconds(static_cast<int64_t>(flags.request_deadline_s * 1000));
  raiseDescriptorLimit();
  // A client that hangs up mid-response must not kill the exporter.
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_signals, sig);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  exporter::GpuMonitor monitor(monitor_options);
  monitor.start();
  exporter::ExporterServer server(monitor, server_options);
  int port = server.start();
  DTRAIN_LOG_INFO("dtrain exporter: serving http://" << server_options.listen.host << ":" << port
                                                     << "/ (/metrics, /api/gpus, /api/history), "
                                                     << monitor.latest()->gpus.size() << " GPU(s), every "
                                                     << flags.interval_s << " s");
  int sig = 0;
  sigwait(&stop_signals, &sig);
  DTRAIN_LOG_INFO("dtrain exporter: stopping on signal " << sig);
  server.stop();
  monitor.stop();
  return 0;
}
#endif

int runExporter(const ExporterFlags& flags) {
  if (flags.list_metrics) {
    for (const std::string& name : exporter::GpuMonitor::metricNames()) std::printf("%s\n", name.c_str());
    return 0;
  }
  exporter::MonitorOptions options;
  options.interval = std::chrono::milliseconds(static_cast<int64_t>(flags.interval_s * 1000));
  options.slow_interval = std::chrono::milliseconds(static_cast<int64_t>(flags.slow_interval_s * 1000));
  options.history = std::chrono::seconds(flags.history_s);
  options.system_root = flags.root;
  if (flags.once) {
    exporter::GpuMonitor monitor(options);
    monitor.collectOnce();
    std::fputs(monitor.latest()->metrics_text.c_str(), stdout);
    return 0;
  }
#if DTRAIN_WITH_EXPORTER_HTTP
  return serve(flags, options);
#else
  throw ConfigError("this dtrain was built without cpp-httplib, so `dtrain exporter` has no HTTP server; "
                    "use --once or --list-metrics, or rebuild with libcpp-httplib-dev installed");
#endif
}

}  // namespace

void registerExporter(CLI::App& app, ExitCode& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "exporter", "Serve this node's GPU metrics to Prometheus (dcgm-exporter's names) and a live page");
  auto bound = bindNew<ExporterFlags>(*cmd, "dtrain exporter", declareExporterOptions);
  cmd->callback([bound, &exit_code] { exit_code.value = runExporter(bound->options); });
}

}  // namespace dtrain::cli
