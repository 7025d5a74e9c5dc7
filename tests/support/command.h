// Running real programs from a test: a shell command line to its end with a
// hard time limit (so a hang fails the test instead of stalling the suite),
// and where the programs under test live. Built on common/process.h.
#pragma once

#include <string>

namespace dtrain::testing {

struct CommandResult {
  int exit_code = -1;  // the shell's convention (128 + signal); 124 when the time limit killed it
  std::string output;  // stdout and stderr together, in the order written
};

// Runs `bash -c command_line` in its own process group with this process's
// environment; after `time_limit_s` the group gets SIGTERM, then SIGKILL 5 s
// later. Whatever of the group outlives the command is killed.
CommandResult runCommand(const std::string& command_line, int time_limit_s = 120);

// The dtrain binary of this build, and the source tree.
std::string dtrainBin();
std::string sourceDir();

// The Python with torch that reference scripts run under: $DTRAIN_TEST_PYTHON,
// else /usr/bin/python3 (Debian's python3-torch, scripts/setup.sh --peers).
std::string testPython();

}  // namespace dtrain::testing
