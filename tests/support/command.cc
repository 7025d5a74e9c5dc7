#include "tests/support/command.h"

#include <cstdlib>

#include <unistd.h>

#include "common/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::testing {

CommandResult runCommand(const std::string& command_line, int time_limit_s) {
  TempDir dir("dtrain-command");
  RunOptions options;
  options.output_path = dir / "output";
  options.timeout = std::chrono::seconds(time_limit_s);
  const RunResult run = runProcess({"/bin/bash", "-c", command_line}, options);
  CommandResult result;
  result.exit_code = run.timed_out ? 124 : run.exitCode();
  result.output = readFile(options.output_path);
  return result;
}

std::string dtrainBin() { return DTRAIN_BIN; }
std::string sourceDir() { return DTRAIN_SOURCE_DIR; }

std::string testPython() {
  const char* configured = std::getenv("DTRAIN_TEST_PYTHON");
  return configured && *configured ? configured : "/usr/bin/python3";
}

}  // namespace dtrain::testing
