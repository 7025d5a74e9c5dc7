#include "doctor/gpu_allreduce.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <thread>

#include "common/error.h"
#include "common/host.h"
#include "common/process.h"
#include "gpu/nvml.h"

namespace dtrain::doctor {
namespace {

using Clock = std::chrono::steady_clock;

// Reads a file and removes it.
std::string takeFile(const std::string& path) {
  std::string out;
  if (FILE* file = std::fopen(path.c_str(), "rb")) {
    char buffer[8192];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) out.append(buffer, n);
    std::fclose(file);
  }
  ::unlink(path.c_str());
  return out;
}

struct ChildRun {
  RunResult result;
  std::string output;  // stdout and stderr together
};

// Runs argv with `env` as its environment and its output in a temporary
// file. On timeout its process group gets SIGTERM (the launcher stops its
// workers), then SIGKILL after a grace period.
ChildRun runChild(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                  double timeout_seconds, const std::string& temp_dir) {
  std::string path = temp_dir + "/dtrain-doctor-allreduce-XXXXXX";
  ::close(DTRAIN_CHECK_ERRNO(::mkstemp(path.data()), "cannot create a temporary file in " + temp_dir));
  RunOptions options;
  options.env = env;
  options.output_path = path;
  options.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(timeout_seconds));
  ChildRun run;
  try {
    run.result = runProcess(argv, options);
  } catch (...) {
    ::unlink(path.c_str());
    throw;
  }
  run.output = takeFile(path);
  return run;
}

std::string lastLines(const std::string& text, size_t count) {
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '\n') --end;
  size_t begin = end;
  for (size_t lines = 0; begin > 0 && lines < count; --begin) {
    if (text[begin - 1] == '\n' && ++lines == count) break;
  }
  return text.substr(begin, end - begin);
}

int visibleGpuCount(const DoctorContext& ctx) {
  int count = static_cast<int>(ctx.nvml->gpus().size());
  auto visible = ctx.envValue("CUDA_VISIBLE_DEVICES");
  if (!visible || visible->empty()) return count;
  int listed = 1;
  for (char c : *visible) listed += c == ',' ? 1 : 0;
  return std::min(count, listed);
}

std::string formatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", value);
  return text;
}

std::string gpuCount(int gpus) { return std::to_string(gpus) + (gpus == 1 ? " GPU" : " GPUs"); }

}  // namespace

CheckResult checkAllreduce(const DoctorContext& ctx) {
  const char* name = "gpu.allreduce";
  if (ctx.nvml == nullptr) return skip(name, "NVML not available");
  const int gpus = ctx.nvml->gpus().empty() ? 0 : visibleGpuCount(ctx);
  if (gpus == 0) return skip(name, "no GPUs");
  const std::string binary = ctx.options.dtrain_binary.empty() ? selfExecutablePath() : ctx.options.dtrain_binary;
  const double timeout = ctx.options.timeout_seconds;
  const std::vector<std::string> argv = {binary, "launch", "--standalone", "--nproc-per-node", std::to_string(gpus),
                                         binary, "bench", "allreduce", "--backend", "nccl", "-b", "256M", "-e",
                                         "256M", "-n", "5", "-w", "2", "--json", "--timeout",
                                         formatNumber(std::max(1.0, timeout))};
  std::string command;
  for (const auto& a : argv) command += (command.empty() ? "" : " ") + a;

  ChildRun run;
  try {
    run = runChild(argv, ctx.env, timeout, ctx.envValue("TMPDIR").value_or("/tmp"));
  } catch (const Error& e) {
    return fail(name, e.message(), "pass the dtrain binary's path; see `dtrain doctor --help`", command);
  }
  const std::string tail = lastLines(run.output, 15);
  if (run.result.timed_out) {
    return fail(name, "timed out after " + formatNumber(timeout) + " s (" + gpuCount(gpus) + ")",
                "a hang in NCCL init or the first collective: re-run with NCCL_DEBUG=INFO, check gpu.topology and "
                "gpu.fabric; raise --timeout if the GPUs are just slow to initialise",
                command + "\n" + tail);
  }
  if (!WIFEXITED(run.result.wait_status) || WEXITSTATUS(run.result.wait_status) != 0) {
    return fail(name, "the all-reduce failed (" + describeWaitStatus(run.result.wait_status) + ")",
                "read the output in detail; re-run its command with NCCL_DEBUG=INFO, and check gpu.topology and "
                "gpu.fabric",
                command + "\n" + tail);
  }
  static const std::regex kBusbw(R"re("avg_busbw_gbps"\s*:\s*([0-9.eE+-]+))re");
  std::smatch match;
  std::string last;
  for (auto it = std::sregex_iterator(run.output.begin(), run.output.end(), kBusbw); it != std::sregex_iterator();
       ++it) {
    last = (*it)[1].str();
  }
  char* end = nullptr;
  double busbw = last.empty() ? NAN : std::strtod(last.c_str(), &end);
  if (last.empty() || !std::isfinite(busbw)) {
    return fail(name, "no bus bandwidth in the output of the all-reduce",
                "the bench printed no \"avg_busbw_gbps\": read the output in detail", command + "\n" + tail);
  }
  return pass(name, "busbw " + formatNumber(busbw) + " GB/s over " + gpuCount(gpus) + " (256 MiB)",
              command);
}

}  // namespace dtrain::doctor
