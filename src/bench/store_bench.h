// The store benchmark behind `dtrain bench store`: N clients (threads, each
// with its own TcpStore connection) each run `ops` rounds of set/get/add on
// their own keys, then all N meet in `barriers` store barriers.
// bench/peers/torch_store.py runs the same workload against PyTorch's
// TCPStore and prints the same fields, so the two compare line by line.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace dtrain {

struct StoreBenchOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: start an in-process TcpStoreServer on `host`
  std::string token;
  int clients = 64;
  int ops = 1000;      // rounds per client; a round is one set, one get, one add
  int barriers = 10;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

struct StoreBenchResult {
  std::string server;  // "host:port"
  bool in_process_server = false;
  int clients = 0;
  int ops_per_client = 0;
  int barriers = 0;
  int64_t total_ops = 0;      // clients * ops * 3
  double elapsed_s = 0;       // wall time of the set/get/add phase
  double ops_per_s = 0;
  double op_mean_us = 0;      // mean latency over all three kinds
  double set_mean_us = 0;
  double get_mean_us = 0;
  double add_mean_us = 0;
  // One barrier's time: from the moment all clients are released into it
  // (a local thread barrier, not timed) to the last client leaving it.
  double barrier_mean_ms = 0;
  double barrier_max_ms = 0;
};

// Runs the benchmark. Store failures propagate (TimeoutError, IoError, ...).
StoreBenchResult runStoreBench(const StoreBenchOptions& options);

// A small aligned table, one metric per line.
std::string formatStoreBenchTable(const StoreBenchResult& result);
// One JSON object; its keys match bench/peers/torch_store.py --json.
std::string formatStoreBenchJson(const StoreBenchResult& result);

}  // namespace dtrain
