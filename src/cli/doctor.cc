// `dtrain doctor`: node preflight (src/doctor/). Runs the readiness checks
// and prints a table or JSON; exit 0 no failure, 1 warnings with --strict,
// 2 any failure or bad input. `--serve-peer` runs the far end of the peer
// test instead.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>

#include "cli/commands.h"
#include "cli/option_binding.h"
#include "common/env.h"
#include "common/host.h"
#include "common/process.h"
#include "common/error.h"
#include "doctor/doctor.h"
#include "doctor/peer_link.h"
#include "doctor/report.h"
#include "gpu/nvml.h"

namespace dtrain::cli {
namespace {

struct DoctorFlags {
  std::string root = "/";
  int expect_gpus = -1;
  std::string check;
  std::string skip;
  bool list = false;
  bool json = false;
  bool strict = false;
  std::string peers;
  bool allreduce = false;
  double timeout_s = 10;
  std::string serve_peer;
};

// Serves until SIGINT or SIGTERM. The signals are blocked before the
// connection threads start and polled here, so no handler runs in them.
int servePeer(const std::string& address_text) {
  doctor::PeerAddress address = doctor::parsePeerAddress(address_text, "--serve-peer", true);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  doctor::PeerServer server(address);
  std::printf("listening on %s\n", server.boundAddress().c_str());
  std::fflush(stdout);
  int signal_number = 0;
  server.serve([&] {
    timespec now{0, 0};
    int sig = sigtimedwait(&stop_signals, nullptr, &now);
    if (sig > 0) signal_number = sig;
    return sig > 0;
  });
  std::printf("stopped on signal %d\n", signal_number);
  return 0;
}

bool needsNvml(const std::vector<doctor::CheckSpec>& checks) {
  for (const doctor::CheckSpec& spec : checks) {
    if (spec.name.rfind("gpu.", 0) == 0 || spec.name == "host.numa") return true;
  }
  return false;
}

// Which options were given on the command line (an empty value counts).
struct GivenOptions {
  bool expect_gpus = false;
  bool peers = false;
  bool check = false;
  bool skip = false;
};

int runDoctor(const DoctorFlags& flags, const GivenOptions& given) {
  if (!flags.serve_peer.empty()) return servePeer(flags.serve_peer);

  doctor::DoctorOptions options;
  options.root = flags.root;
  if (given.expect_gpus) options.expect_gpus = flags.expect_gpus;
  if (given.peers) {
    for (const doctor::PeerAddress& peer : doctor::parsePeerList(flags.peers)) options.peers.push_back(peer.text);
  }
  options.allreduce = flags.allreduce;
  options.timeout_seconds = flags.timeout_s;
  options.dtrain_binary = selfExecutablePath();

  std::vector<doctor::CheckSpec> all = doctor::allChecks();
  if (flags.list) {
    std::fputs(doctor::formatCheckList(all).c_str(), stdout);
    return 0;
  }
  SystemRoot root(flags.root);
  std::vector<std::string> check =
      given.check ? doctor::splitNameList(flags.check, "--check") : std::vector<std::string>{};
  std::vector<std::string> skip =
      given.skip ? doctor::splitNameList(flags.skip, "--skip") : std::vector<std::string>{};
  std::vector<doctor::CheckSpec> selected = doctor::selectChecks(all, check, skip, options);

  std::map<std::string, std::string> env = currentEnvironment();
  doctor::DoctorContext ctx{root, env, options, nullptr, {}};
  std::unique_ptr<gpu::Nvml> nvml;
  if (needsNvml(selected)) {
    try {
      nvml = gpu::Nvml::open();
      ctx.nvml = nvml.get();
    } catch (const std::exception& e) {
      const auto* error = dynamic_cast<const Error*>(&e);
      ctx.nvml_error = error != nullptr ? error->message() : e.what();
    }
  }

  doctor::DoctorReport report;
  report.host = hostName();
  report.root = root.root();
  report.results = doctor::runChecks(selected, ctx);
  report.exit_code = doctor::exitCodeFor(report.results, flags.strict);
  if (flags.json) {
    std::fputs(doctor::formatJson(report).c_str(), stdout);
  } else {
    bool color = ::isatty(STDOUT_FILENO) && !envString("NO_COLOR");
    std::fputs(doctor::formatTable(report, color).c_str(), stdout);
  }
  std::fflush(stdout);
  return report.exit_code;
}

void declareDoctorOptions(OptionSet& set, DoctorFlags& f) {
  set.path("--root", f.root, "Read /proc, /sys and /etc under this directory instead of / (fixture trees for tests)")
      .existingDirectory();
  set.integer("--expect-gpus", f.expect_gpus, "GPUs this node must have")
      .range(0, 1 << 20)
      .defaultMeans("Slurm's GRES count when set");
  set.text("--check", f.check,
           "Run only these checks: a comma list of names or groups (gpu, rdma, nccl, host, peers)");
  set.text("--skip", f.skip, "Leave out these checks: a comma list of names or groups");
  set.toggle("--list", f.list, "Print every check with its description, and exit");
  set.toggle("--json", f.json, "Print the results as JSON instead of a table");
  set.toggle("--strict", f.strict, "Exit 1 when any check warns (a failure still exits 2)");
  set.text("--peers", f.peers,
           "Check TCP reachability and bandwidth to these peers running `dtrain doctor --serve-peer`: "
           "HOST:PORT[,HOST:PORT...]");
  set.toggle("--allreduce", f.allreduce, "Run a quick all-reduce across this node's GPUs");
  set.number("--timeout", f.timeout_s, "Seconds each active check (--peers, --allreduce) may take")
      .range(0.001, 3600)
      .unit("seconds");
  set.text("--serve-peer", f.serve_peer,
           "Serve the far end of --peers on ADDR:PORT (PORT 0: any free port, printed) until SIGINT/SIGTERM");
}

}  // namespace

void registerDoctor(CLI::App& app, ExitCode& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "doctor", "Check that this node is ready for distributed training (GPUs, RDMA, NCCL environment, host)");
  auto bound = bindNew<DoctorFlags>(*cmd, "dtrain doctor", declareDoctorOptions);
  cmd->callback([bound, cmd, &exit_code] {
    // An option given with an empty value counts as given (and is checked).
    GivenOptions given{cmd->count("--expect-gpus") > 0, cmd->count("--peers") > 0, cmd->count("--check") > 0,
                       cmd->count("--skip") > 0};
    exit_code.value = runDoctor(bound->options, given);
  });
}

}  // namespace dtrain::cli
