// `dtrain slurm conf|hostnames`: scheduler glue.
#include "cli/commands.h"

namespace dtrain::cli {

void registerSlurm(CLI::App& app, ExitCode& exit_code) {}

}  // namespace dtrain::cli
