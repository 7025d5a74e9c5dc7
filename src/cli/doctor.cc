// `dtrain doctor`: node preflight (src/doctor/).
#include "cli/commands.h"

namespace dtrain::cli {

void registerDoctor(CLI::App& app, ExitCode& exit_code) {}

}  // namespace dtrain::cli
