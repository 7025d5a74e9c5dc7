// The root-cause report of a failed worker group (declared in
// worker_group.h): torchrun's "Root Cause (first observed failure)" block,
// as text for the console and as JSON for <log_dir>/failure.json.
#include <signal.h>

#include <ctime>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/text.h"
#include "launch/worker_group.h"

namespace dtrain {
namespace {

struct SignalEntry {
  int number;
  const char* name;
};

constexpr SignalEntry kSignals[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"},   {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},     {SIGBUS, "SIGBUS"},     {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"},   {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},     {SIGTERM, "SIGTERM"},   {SIGCHLD, "SIGCHLD"},
    {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"},     {SIGTSTP, "SIGTSTP"},   {SIGTTIN, "SIGTTIN"},
    {SIGTTOU, "SIGTTOU"}, {SIGURG, "SIGURG"},       {SIGXCPU, "SIGXCPU"},   {SIGXFSZ, "SIGXFSZ"},
    {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"}, {SIGIO, "SIGIO"},
    {SIGPWR, "SIGPWR"},   {SIGSYS, "SIGSYS"},
#ifdef SIGSTKFLT
    {SIGSTKFLT, "SIGSTKFLT"},
#endif
};

std::string isoTime(std::chrono::system_clock::time_point time) {
  std::time_t seconds = std::chrono::system_clock::to_time_t(time);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

// torchrun's convention: a worker killed by signal N has exit code -N.
int displayedExitCode(const WorkerFailure& failure) {
  return failure.signal != 0 ? -failure.signal : failure.exit_code;
}

std::string signalDescription(int signal) {
  std::string name = signalName(signal);
  if (signal == SIGKILL) name += " (possibly killed by the OOM killer)";
  return name;
}

// The error file's message, else its raw text, else torchrun's "<N/A>".
std::string errorFileText(const WorkerFailure& failure) {
  std::string text = trimmed(failure.error_message);
  if (text.empty()) text = trimmed(failure.error_file_contents);
  return text.empty() ? "<N/A>" : text;
}

// Continuation lines of a multi-line value line up under its first line.
std::string indented(const std::string& text, const std::string& indent) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += indent;
  }
  return out;
}

void writeFailureFields(std::ostringstream& out, const WorkerFailure& failure, const std::string& host) {
  out << "  time      : " << isoTime(failure.time) << "\n"
      << "  host      : " << host << "\n"
      << "  rank      : " << failure.global_rank << " (local_rank: " << failure.local_rank << ")\n"
      << "  exit code : " << displayedExitCode(failure) << " (pid: " << failure.pid << ")\n";
  if (failure.signal != 0) out << "  signal    : " << signalDescription(failure.signal) << "\n";
  out << "  error file: " << indented(errorFileText(failure), "              ") << "\n";
}

}  // namespace

std::string signalName(int signal) {
  for (const auto& entry : kSignals) {
    if (entry.number == signal) return entry.name;
  }
  return "signal " + std::to_string(signal);
}

int launcherExitCode(const WorkerFailure& root_cause) {
  return root_cause.signal != 0 ? 128 + root_cause.signal : root_cause.exit_code;
}

std::string formatFailureSummary(const std::vector<WorkerFailure>& failures, const std::string& host,
                                 int attempt) {
  std::ostringstream out;
  out << "dtrain launch: worker group failed (attempt " << attempt << ")\n";
  if (failures.empty()) {
    out << "Root cause: <N/A> (no local worker failed)\n";
    return out.str();
  }
  const WorkerFailure& root = failures.front();
  out << "Root cause (first observed failure):\n";
  writeFailureFields(out, root, host);
  if (root.stderr_tail.empty()) {
    out << "  last lines of stderr: <none>\n";
  } else {
    out << "  last " << root.stderr_tail.size() << " lines of stderr:\n";
    for (const auto& line : root.stderr_tail) out << "    " << line << "\n";
  }
  if (failures.size() == 1) {
    out << "Other failures: <none>\n";
    return out.str();
  }
  out << "Other failures:\n";
  for (size_t i = 1; i < failures.size(); ++i) {
    out << "[" << i << "]:\n";
    writeFailureFields(out, failures[i], host);
  }
  return out.str();
}

std::string missingModuleHint(const WorkerFailure& root_cause, const std::string& python_path,
                              const std::string& python_origin) {
  if (python_path.empty()) return "";
  const std::string marker = "ModuleNotFoundError: No module named '";
  std::vector<std::string> texts = root_cause.stderr_tail;
  texts.push_back(root_cause.error_message);
  for (const std::string& text : texts) {
    const size_t at = text.find(marker);
    if (at == std::string::npos) continue;
    const size_t begin = at + marker.size();
    const std::string module = text.substr(begin, text.find('\'', begin) - begin);
    std::string hint = "Hint: the workers ran " + python_path + " (" + python_origin;
    if (python_origin != "PYTHON_EXEC") hint += "; torchrun runs its own interpreter, sys.executable";
    hint += "), which cannot import '" + module + "'.\n"
            "  To run them with another Python, name it: PYTHON_EXEC=/path/to/python3 dtrain launch ...\n";
    return hint;
  }
  return "";
}

std::string failureSummaryJson(const std::vector<WorkerFailure>& failures, const std::string& host,
                               int attempt) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& failure : failures) {
    nlohmann::json entry;
    entry["time"] = isoTime(failure.time);
    entry["timestamp"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                             failure.time.time_since_epoch()).count() / 1000.0;
    entry["host"] = host;
    entry["rank"] = failure.global_rank;
    entry["local_rank"] = failure.local_rank;
    entry["pid"] = failure.pid;
    entry["exit_code"] = displayedExitCode(failure);
    entry["signal"] = failure.signal != 0 ? nlohmann::json(signalName(failure.signal)) : nlohmann::json();
    entry["signal_number"] = failure.signal;
    entry["error_file"] = errorFileText(failure);
    entry["error_file_contents"] = failure.error_file_contents;
    entry["stderr_tail"] = failure.stderr_tail;
    list.push_back(std::move(entry));
  }
  nlohmann::json summary;
  summary["attempt"] = attempt;
  summary["host"] = host;
  summary["root_cause"] = failures.empty() ? nlohmann::json() : nlohmann::json(0);
  summary["exit_code"] = failures.empty() ? nlohmann::json() : nlohmann::json(launcherExitCode(failures.front()));
  summary["failures"] = std::move(list);
  // Worker output need not be UTF-8: replace what is not instead of throwing.
  return summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace dtrain
