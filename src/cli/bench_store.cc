// `dtrain bench store`: store throughput and barrier latency (see
// bench/store_bench.h; bench/store_compare.sh sets it against PyTorch's TCPStore).
#include <cstdio>
#include <memory>

#include "bench/store_bench.h"
#include "cli/commands.h"
#include "store/tcp_store.h"

namespace dtrain::cli {

void registerBenchStore(CLI::App& bench, ExitCode& exit_code) {
  CLI::App* cmd = bench.add_subcommand(
      "store", "Store benchmark: N clients doing set/get/add rounds, then N-way barriers");
  struct Flags {
    std::string host = "127.0.0.1";
    int port = 0;
    int clients = 64;
    int ops = 1000;
    int barriers = 10;
    double timeout_s = 300;
    bool json = false;
  };
  auto flags = std::make_shared<Flags>();
  cmd->add_option("--host", flags->host,
                  "Address of the in-process server, or of an external one with --port")
      ->capture_default_str();
  cmd->add_option("--port", flags->port,
                  "Use the store server already running at --host:--port "
                  "(default: start one in-process)")
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--clients", flags->clients, "Client connections, one thread each")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  cmd->add_option("--ops", flags->ops, "Rounds of set+get+add per client")
      ->check(CLI::Range(0, 100000000))
      ->capture_default_str();
  cmd->add_option("--barriers", flags->barriers, "N-way store barriers after the rounds")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  cmd->add_option("--timeout", flags->timeout_s, "Seconds a store operation may wait")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print one JSON object instead of the table");

  cmd->callback([flags, &exit_code] {
    StoreBenchOptions options;
    options.host = flags->host;
    options.port = static_cast<uint16_t>(flags->port);
    options.token = storeTokenFromEnvironment();
    options.clients = flags->clients;
    options.ops = flags->ops;
    options.barriers = flags->barriers;
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(flags->timeout_s * 1000));
    StoreBenchResult result = runStoreBench(options);
    std::fputs((flags->json ? formatStoreBenchJson(result) : formatStoreBenchTable(result)).c_str(),
               stdout);
    exit_code.value = 0;
  });
}

}  // namespace dtrain::cli
