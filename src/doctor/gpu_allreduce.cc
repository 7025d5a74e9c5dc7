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
#include <variant>
#include <map>

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

// The local GPUs as CUDA_VISIBLE_DEVICES names them: its entries when set
// (at most NVML's count), else 0 .. count - 1.
std::vector<std::string> visibleGpus(const DoctorContext& ctx) {
  const size_t count = ctx.nvml->gpus().size();
  std::vector<std::string> out;
  auto visible = ctx.envValue("CUDA_VISIBLE_DEVICES");
  if (!visible || visible->empty()) {
    for (size_t i = 0; i < count; ++i) out.push_back(std::to_string(i));
    return out;
  }
  size_t begin = 0;
  while (out.size() < count) {
    const size_t comma = visible->find(',', begin);
    out.push_back(visible->substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

int visibleGpuCount(const DoctorContext& ctx) { return static_cast<int>(visibleGpus(ctx).size()); }

// The last "avg_busbw_gbps" of a bench's JSON output (NaN when none).
double lastBusbw(const std::string& output) {
  static const std::regex kBusbw(R"re("avg_busbw_gbps"\s*:\s*([0-9.eE+-]+))re");
  std::string last;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), kBusbw); it != std::sregex_iterator(); ++it) {
    last = (*it)[1].str();
  }
  if (last.empty()) return NAN;
  char* end = nullptr;
  return std::strtod(last.c_str(), &end);
}

std::string joined(const std::vector<std::string>& argv) {
  std::string command;
  for (const auto& a : argv) command += (command.empty() ? "" : " ") + a;
  return command;
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
  const std::string command = joined(argv);

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
  const double busbw = lastBusbw(run.output);
  if (!std::isfinite(busbw)) {
    return fail(name, "no bus bandwidth in the output of the all-reduce",
                "the bench printed no \"avg_busbw_gbps\": read the output in detail", command + "\n" + tail);
  }
  return pass(name, "busbw " + formatNumber(busbw) + " GB/s over " + gpuCount(gpus) + " (256 MiB)",
              command);
}

PairVerdict judgePairs(const std::vector<PairRate>& rates) {
  PairVerdict v;
  std::vector<double> sorted;
  for (size_t i = 0; i < rates.size(); ++i) {
    sorted.push_back(rates[i].busbw_gbps);
    if (rates[i].busbw_gbps < rates[v.slowest].busbw_gbps) v.slowest = i;
  }
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  v.median_gbps = n == 0 ? 0 : n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  v.degraded = n > 0 && rates[v.slowest].busbw_gbps < 0.5 * v.median_gbps;
  return v;
}

namespace {

// One pair's sendrecv run: its rate, or a failed check naming the pair.
std::variant<PairRate, CheckResult> measurePair(const DoctorContext& ctx, const std::string& a, const std::string& b) {
  const char* name = "gpu.sendrecv";
  const std::string binary = ctx.options.dtrain_binary.empty() ? selfExecutablePath() : ctx.options.dtrain_binary;
  const double timeout = ctx.options.timeout_seconds;
  const std::vector<std::string> argv = {binary, "launch", "--standalone", "--nproc-per-node", "2", binary,
                                         "bench", "sendrecv", "--backend", "nccl", "-b", "64M", "-e", "64M", "-n",
                                         "5", "-w", "2", "--json", "--timeout", formatNumber(std::max(1.0, timeout))};
  const std::string pair = "GPU" + a + "-GPU" + b;
  const std::string command = "CUDA_VISIBLE_DEVICES=" + a + "," + b + " " + joined(argv);
  std::map<std::string, std::string> env = ctx.env;
  env["CUDA_VISIBLE_DEVICES"] = a + "," + b;
  ChildRun run;
  try {
    run = runChild(argv, env, timeout, ctx.envValue("TMPDIR").value_or("/tmp"));
  } catch (const Error& e) {
    return fail(name, e.message(), "pass the dtrain binary's path; see `dtrain doctor --help`", command);
  }
  const std::string tail = lastLines(run.output, 15);
  const std::string hint = "check gpu.topology (an inactive NVLink, no P2P) and re-run the command with NCCL_DEBUG=INFO";
  if (run.result.timed_out) {
    return fail(name, pair + ": timed out after " + formatNumber(timeout) + " s", hint, command + "\n" + tail);
  }
  if (!WIFEXITED(run.result.wait_status) || WEXITSTATUS(run.result.wait_status) != 0) {
    return fail(name, pair + ": the send/recv failed (" + describeWaitStatus(run.result.wait_status) + ")", hint,
                command + "\n" + tail);
  }
  const double busbw = lastBusbw(run.output);
  if (!std::isfinite(busbw)) {
    return fail(name, pair + ": no bus bandwidth in the output of the send/recv", hint, command + "\n" + tail);
  }
  return PairRate{pair, busbw};
}

}  // namespace

CheckResult checkSendRecvPairs(const DoctorContext& ctx) {
  const char* name = "gpu.sendrecv";
  if (ctx.nvml == nullptr) return skip(name, "NVML not available");
  const std::vector<std::string> gpus = ctx.nvml->gpus().empty() ? std::vector<std::string>{} : visibleGpus(ctx);
  if (gpus.empty()) return skip(name, "no GPUs");
  if (gpus.size() == 1) return skip(name, "one GPU: no pairs");
  std::vector<PairRate> rates;
  std::string detail;
  for (size_t i = 0; i < gpus.size(); ++i) {
    for (size_t j = i + 1; j < gpus.size(); ++j) {
      auto measured = measurePair(ctx, gpus[i], gpus[j]);
      if (auto* failed = std::get_if<CheckResult>(&measured)) return *failed;
      rates.push_back(std::get<PairRate>(measured));
      detail += rates.back().pair + ": busbw " + formatNumber(rates.back().busbw_gbps) + " GB/s\n";
    }
  }
  const PairVerdict v = judgePairs(rates);
  const PairRate& slowest = rates[v.slowest];
  const std::string pairs = std::to_string(rates.size()) + (rates.size() == 1 ? " pair" : " pairs");
  if (v.degraded) {
    return fail(name,
                "the slowest pair " + slowest.pair + " moves " + formatNumber(slowest.busbw_gbps) +
                    " GB/s, under half the median " + formatNumber(v.median_gbps) + " GB/s of " + pairs,
                "check gpu.topology for that pair (an inactive NVLink, P2P through the host) and nvidia-smi nvlink -s",
                detail);
  }
  return pass(name,
              "slowest pair " + slowest.pair + " busbw " + formatNumber(slowest.busbw_gbps) + " GB/s, median " +
                  formatNumber(v.median_gbps) + " GB/s over " + pairs + " (64 MiB)",
              detail);
}

}  // namespace dtrain::doctor
