#include "cli/commands.h"
namespace dtrain::cli {
void registerBenchAllreduce(CLI::App&, ExitCode&) {}
}  // namespace dtrain::cli
