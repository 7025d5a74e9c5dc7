// `dtrain bench store`: store throughput and barrier latency (see
// bench/store_bench.h; bench/store_compare.sh sets it against PyTorch's TCPStore).
#include <cstdio>
#include <memory>

#include "bench/store_bench.h"
#include "cli/commands.h"
#include "cli/option_binding.h"
#include "store/tcp_store.h"

namespace dtrain::cli {

namespace {

struct StoreBenchFlags {
  std::string host = "127.0.0.1";
  int port = 0;
  int clients = 64;
  int ops = 1000;
  int barriers = 10;
  double timeout_s = 300;
  bool json = false;
};

void declareStoreBenchOptions(OptionSet& set, StoreBenchFlags& f) {
  set.text("--host", f.host, "Address of the in-process server, or of an external one with --port").nonEmpty();
  set.port("--port", f.port, "Use the store server already running at --host:--port")
      .zeroAllowed("start one in-process");
  set.integer("--clients", f.clients, "Client connections, one thread each").range(1, 65536);
  set.integer("--ops", f.ops, "Rounds of set+get+add per client").range(0, 100'000'000);
  set.integer("--barriers", f.barriers, "N-way store barriers after the rounds").range(0, 1'000'000);
  set.number("--timeout", f.timeout_s, "Seconds a store operation may wait").range(0.001, 86400).unit("seconds");
  set.toggle("--json", f.json, "Print one JSON object instead of the table");
}

}  // namespace

void registerBenchStore(CLI::App& bench, ExitCode& exit_code) {
  CLI::App* cmd = bench.add_subcommand(
      "store", "Store benchmark: N clients doing set/get/add rounds, then N-way barriers");
  auto bound = bindNew<StoreBenchFlags>(*cmd, "dtrain bench store", declareStoreBenchOptions);
  cmd->callback([bound, &exit_code] {
    const StoreBenchFlags& f = bound->options;
    StoreBenchOptions options;
    options.host = f.host;
    options.port = static_cast<uint16_t>(f.port);
    options.token = storeTokenFromEnvironment();
    options.clients = f.clients;
    options.ops = f.ops;
    options.barriers = f.barriers;
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
    StoreBenchResult result = runStoreBench(options);
    std::fputs((f.json ? formatStoreBenchJson(result) : formatStoreBenchTable(result)).c_str(), stdout);
    exit_code.value = 0;
  });
}

}  // namespace dtrain::cli
