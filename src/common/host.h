// The OS seam for facts about this host and process, for every layer.
#pragma once

#include <string>

namespace dtrain {

// This host's name (gethostname), read once. When the kernel will not say,
// "localhost": a name every tool accepts and that still reads as "this
// machine" in a log line, where "unknown" would look like a bug.
const std::string& hostName();

// The CPU time the calling thread has used since it started (seconds,
// CLOCK_THREAD_CPUTIME_ID): what it computed, not the time it was blocked
// (a collective's wait) or runnable but waiting for a CPU (other
// processes' load).
double threadCpuSeconds();

// The running executable's path (/proc/self/exe), so that a command can run
// the same binary again (doctor's all-reduce, bench train's groups, the
// training runtime found beside it). IoError naming /proc/self/exe when it
// cannot be read.
std::string selfExecutablePath();

// A fresh, private (0700) directory "<$TMPDIR or /tmp>/<prefix>-XXXXXX"
// (mkdtemp); the caller owns it. IoError naming the pattern when it cannot
// be made.
std::string makeTemporaryDirectory(const std::string& prefix);

}  // namespace dtrain
