#include "bench/store_bench.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/socket.h"
#include "store/tcp_store.h"

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// What one client thread measured.
struct ClientTimes {
  Clock::time_point ops_start, ops_end;
  Clock::duration set_total{}, get_total{}, add_total{};
  std::vector<Clock::time_point> barrier_start, barrier_end;
};

// Unique per run, so repeated runs against one external server never share
// barrier keys (a barrier name is good for one use only).
std::string runPrefix() {
  return "bench/" + std::to_string(getpid()) + "-" +
         std::to_string(Clock::now().time_since_epoch().count()) + "/";
}

void runClient(const StoreBenchOptions& options, const TcpStoreClientOptions& connect,
               const std::string& prefix, int index, std::barrier<>& sync,
               const std::atomic<bool>& failed, ClientTimes& times) {
  TcpStore store(connect);
  const std::string key = prefix + "c" + std::to_string(index) + "/value";
  const std::string counter = prefix + "c" + std::to_string(index) + "/count";
  const std::string value(32, static_cast<char>('a' + index % 26));
  sync.arrive_and_wait();  // every client connected; the timed phase starts together
  times.ops_start = Clock::now();
  for (int round = 0; round < options.ops; ++round) {
    auto t0 = Clock::now();
    store.set(key, value);
    auto t1 = Clock::now();
    if (store.get(key).size() != value.size()) throw CommError("store bench: get returned a wrong value");
    auto t2 = Clock::now();
    store.add(counter, 1);
    auto t3 = Clock::now();
    times.set_total += t1 - t0;
    times.get_total += t2 - t1;
    times.add_total += t3 - t2;
  }
  times.ops_end = Clock::now();
  for (int b = 0; b < options.barriers; ++b) {
    sync.arrive_and_wait();
    if (failed) return;  // a peer is gone; its barrier would only time out
    times.barrier_start[b] = Clock::now();
    storeBarrier(store, prefix + "barrier/" + std::to_string(b), options.clients, options.timeout);
    times.barrier_end[b] = Clock::now();
  }
}

StoreBenchResult summarize(const StoreBenchOptions& options, const std::vector<ClientTimes>& times) {
  StoreBenchResult r;
  r.clients = options.clients;
  r.ops_per_client = options.ops;
  r.barriers = options.barriers;
  r.total_ops = int64_t{options.clients} * options.ops * 3;
  Clock::time_point start = times[0].ops_start, end = times[0].ops_end;
  Clock::duration set_total{}, get_total{}, add_total{};
  for (const ClientTimes& t : times) {
    start = std::min(start, t.ops_start);
    end = std::max(end, t.ops_end);
    set_total += t.set_total;
    get_total += t.get_total;
    add_total += t.add_total;
  }
  r.elapsed_s = seconds(end - start);
  r.ops_per_s = r.elapsed_s > 0 ? static_cast<double>(r.total_ops) / r.elapsed_s : 0;
  double rounds = static_cast<double>(options.clients) * options.ops;
  if (rounds > 0) {
    r.set_mean_us = micros(set_total) / rounds;
    r.get_mean_us = micros(get_total) / rounds;
    r.add_mean_us = micros(add_total) / rounds;
    r.op_mean_us = (r.set_mean_us + r.get_mean_us + r.add_mean_us) / 3;
  }
  double sum_ms = 0;
  for (int b = 0; b < options.barriers; ++b) {
    Clock::time_point first_in = times[0].barrier_start[b], last_out = times[0].barrier_end[b];
    for (const ClientTimes& t : times) {
      first_in = std::min(first_in, t.barrier_start[b]);
      last_out = std::max(last_out, t.barrier_end[b]);
    }
    double ms = micros(last_out - first_in) / 1000.0;
    sum_ms += ms;
    r.barrier_max_ms = std::max(r.barrier_max_ms, ms);
  }
  if (options.barriers > 0) r.barrier_mean_ms = sum_ms / options.barriers;
  return r;
}

// Descriptors the process needs beyond the clients' (stdio, logs, epoll).
constexpr uint64_t kDescriptorHeadroom = 64;

// Fails before starting thousands of threads, naming the limit and how to
// raise it, instead of "Too many open files" from the thousandth connect().
void checkDescriptorsFor(int clients, bool in_process_server) {
  const uint64_t limit = raiseOpenFileLimit();
  const uint64_t per_client = in_process_server ? 2 : 1;
  const uint64_t needed = static_cast<uint64_t>(clients) * per_client + kDescriptorHeadroom;
  if (needed <= limit) return;
  rlimit hard{};
  getrlimit(RLIMIT_NOFILE, &hard);
  const std::string hard_text = hard.rlim_max == RLIM_INFINITY ? "unlimited" : std::to_string(hard.rlim_max);
  throw ConfigError("--clients " + std::to_string(clients) + " needs about " + std::to_string(needed) +
                    " open files (" + (in_process_server ? "two per client with the in-process server" : "one per client") +
                    ", plus " + std::to_string(kDescriptorHeadroom) + "), but this process may open " +
                    std::to_string(limit) + " (RLIMIT_NOFILE; hard limit " + hard_text +
                    "). Raise it with `ulimit -n " + std::to_string(needed) +
                    "` (root, or a higher hard limit in /etc/security/limits.conf or systemd's LimitNOFILE=), "
                    "or run fewer clients" + (in_process_server ? " or an external server (--port)" : ""));
}

}  // namespace

StoreBenchResult runStoreBench(const StoreBenchOptions& options) {
  if (options.clients < 1 || options.ops < 0 || options.barriers < 0) {
    throw ConfigError("store bench needs clients >= 1, ops >= 0 and barriers >= 0");
  }
  checkDescriptorsFor(options.clients, options.port == 0);
  std::unique_ptr<TcpStoreServer> server;
  TcpStoreClientOptions connect;
  connect.host = options.host;
  connect.port = options.port;
  connect.token = options.token;
  connect.timeout = options.timeout;
  // The deadline given is the deadline kept: a wrong port or an unknown host
  // fails after --timeout, not after the client's 60-s default.
  connect.connect_timeout = options.timeout;
  if (options.port == 0) {
    TcpStoreServerOptions server_options;
    server_options.bind_address = options.host;
    server_options.token = options.token;
    server = std::make_unique<TcpStoreServer>(server_options);
    connect.port = server->port();
  }

  const std::string prefix = runPrefix();
  std::vector<ClientTimes> times(options.clients);
  for (ClientTimes& t : times) {
    t.barrier_start.resize(options.barriers);
    t.barrier_end.resize(options.barriers);
  }
  std::barrier<> sync(options.clients);
  std::mutex error_mutex;
  std::exception_ptr first_error;
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  threads.reserve(options.clients);
  for (int i = 0; i < options.clients; ++i) {
    threads.emplace_back([&, i] {
      try {
        runClient(options, connect, prefix, i, sync, failed, times[i]);
      } catch (...) {
        failed = true;
        {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (!first_error) first_error = std::current_exception();
        }
        // Leaves the local barrier so the other threads are not stuck on us.
        sync.arrive_and_drop();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);

  StoreBenchResult result = summarize(options, times);
  result.server = hostPortText(options.host, connect.port);
  result.in_process_server = server != nullptr;
  return result;
}

std::string formatStoreBenchTable(const StoreBenchResult& r) {
  std::ostringstream os;
  os << "dtrain store benchmark: " << r.clients << " clients x " << r.ops_per_client
     << " rounds of set+get+add, " << r.barriers << " barriers\n";
  os << "server " << r.server << (r.in_process_server ? " (in-process)" : "") << "\n\n";
  char line[128];
  auto row = [&](const char* metric, const char* format, double value) {
    char number[48];
    std::snprintf(number, sizeof(number), format, value);
    std::snprintf(line, sizeof(line), "  %-20s %14s\n", metric, number);
    os << line;
  };
  std::snprintf(line, sizeof(line), "  %-20s %14s\n", "metric", "value");
  os << line;
  row("total ops", "%.0f", static_cast<double>(r.total_ops));
  row("elapsed (s)", "%.3f", r.elapsed_s);
  row("throughput (ops/s)", "%.0f", r.ops_per_s);
  row("op mean (us)", "%.1f", r.op_mean_us);
  row("set mean (us)", "%.1f", r.set_mean_us);
  row("get mean (us)", "%.1f", r.get_mean_us);
  row("add mean (us)", "%.1f", r.add_mean_us);
  row("barrier mean (ms)", "%.2f", r.barrier_mean_ms);
  row("barrier max (ms)", "%.2f", r.barrier_max_ms);
  return os.str();
}

std::string formatStoreBenchJson(const StoreBenchResult& r) {
  nlohmann::json j = {
      {"implementation", "dtrain"},   {"server", r.server},
      {"in_process_server", r.in_process_server},
      {"clients", r.clients},         {"ops_per_client", r.ops_per_client},
      {"barriers", r.barriers},       {"total_ops", r.total_ops},
      {"elapsed_s", r.elapsed_s},     {"ops_per_s", r.ops_per_s},
      {"op_mean_us", r.op_mean_us},   {"set_mean_us", r.set_mean_us},
      {"get_mean_us", r.get_mean_us}, {"add_mean_us", r.add_mean_us},
      {"barrier_mean_ms", r.barrier_mean_ms}, {"barrier_max_ms", r.barrier_max_ms},
  };
  return j.dump(2) + "\n";
}

}  // namespace dtrain
