// `dtrain launch`: torchrun's command line, run by the ElasticAgent.
#include <signal.h>

#include <atomic>
#include <cstdio>

#include "cli/commands.h"
#include "common/error.h"
#include "common/process.h"
#include "launch/elastic_agent.h"
#include "launch/launch_config.h"

namespace dtrain::cli {
namespace {

std::atomic<ElasticAgent*> g_agent{nullptr};

extern "C" void forwardToAgent(int signal) {
  ElasticAgent* agent = g_agent.load();
  if (agent != nullptr && agent->hasWorkers()) {
    agent->requestStop(signal);
    return;
  }
  // Nothing to clean up (no workers yet): die of the signal as usual.
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

// Handlers (not a blocked mask): a caught signal reverts to its default in
// the workers at exec, and a mask would be inherited by them.
void installSignalHandlers(const std::vector<int>& signals) {
  struct sigaction action {};
  action.sa_handler = forwardToAgent;
  sigemptyset(&action.sa_mask);
  for (int sig : signals) ::sigaction(sig, &action, nullptr);
}

int runLaunch(const std::vector<std::string>& args) {
  LaunchConfig config = parseLaunchArgs(args, currentEnvironment());
  if (config.help_requested) {
    std::fputs(launchUsage().c_str(), stdout);
    return 0;
  }
  ElasticAgent agent(config);
  g_agent.store(&agent);
  installSignalHandlers(config.signals_to_handle);
  int rc = agent.run();
  g_agent.store(nullptr);
  return rc;
}

}  // namespace

void registerLaunch(CLI::App& app, ExitCode& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "launch", "Start workers on this node, torchrun-compatible (dtrain launch --help for the flags)");
  cmd->set_help_flag();  // torchrun's flags are parsed by parseLaunchArgs, --help too
  cmd->prefix_command();
  cmd->allow_extras();
  cmd->callback([cmd, &exit_code] { exit_code.value = runLaunch(cmd->remaining()); });
}

}  // namespace dtrain::cli
