#include "cli/commands.h"
namespace dtrain::cli {
void registerBenchStore(CLI::App&, ExitCode&) {}
}  // namespace dtrain::cli
