// Runs a shell command line as a real process for CLI tests, with a hard
// time limit so a hang fails the test instead of stalling the suite.
#pragma once

#include <string>

namespace dtrain::testing {

struct CommandResult {
  int exit_code = -1;  // 124 when the time limit killed it
  std::string output;  // stdout and stderr together
};

CommandResult runCommand(const std::string& command_line, int time_limit_s = 120);
// A TCP port on 127.0.0.1 that was free a moment ago.
int freePort();
std::string dtrainBin();
std::string sourceDir();

}  // namespace dtrain::testing
