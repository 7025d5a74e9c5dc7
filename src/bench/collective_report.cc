#include "bench/collective_report.h"
#include "common/text.h"

#include <cstdio>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

namespace dtrain::bench {
namespace {

// "8 x NVIDIA H100 80GB HBM3", or "4 x A, 4 x B" in order of first rank.
std::string deviceSummary(const std::vector<std::string>& devices) {
  std::vector<std::pair<std::string, int>> groups;
  for (const auto& d : devices) {
    auto it = groups.begin();
    while (it != groups.end() && it->first != d) ++it;
    if (it == groups.end()) groups.emplace_back(d, 1); else ++it->second;
  }
  std::string out;
  for (const auto& [name, n] : groups) {
    if (!out.empty()) out += ", ";
    out += name == "cpu" ? name : std::to_string(n) + " x " + name;
  }
  return out.empty() ? "no devices" : out;
}

std::string timeText(double us) {
  char buf[32];
  if (us >= 10000.0) std::snprintf(buf, sizeof(buf), "%7.0f", us);
  else if (us >= 100.0) std::snprintf(buf, sizeof(buf), "%7.1f", us);
  else std::snprintf(buf, sizeof(buf), "%7.2f", us);
  return buf;
}

const char* blockingNote(int blocking) {
  switch (blocking) {
    case 1: return "# Blocking Enabled: wait and barrier after each iteration\n";
    case 2: return "# Blocking Enabled: wait after each iteration, no barrier\n";
    case 3: return "# Blocking Enabled: wait and barrier after each iteration; reported time excludes barrier\n";
    default: return "";
  }
}

}  // namespace

std::string formatCollectiveTitle(const CollectiveBenchOptions& o, const BenchJob& job) {
  std::string where = counted(job.processes, "process", "processes");
  if (job.backend == "nccl") where += " x " + counted(job.gpus_per_process, "GPU", "GPUs");
  std::set<std::string> hosts(job.hosts.begin(), job.hosts.end());
  return "# dtrain bench " + std::string(collectiveName(o.collective)) + ": " + job.backend + " on " +
         deviceSummary(job.devices) + " (" + where + "), " +
         counted(static_cast<int>(std::max<size_t>(hosts.size(), 1)), "host", "hosts") + "\n";
}

std::string formatCollectiveHeader(const CollectiveBenchOptions& o, const BenchJob& job) {
  char line[512];
  std::ostringstream os;
  os << formatCollectiveTitle(o, job);
  std::snprintf(line, sizeof(line),
                "# nThread 1 nGpus %d minBytes %llu maxBytes %llu step: %llu(%s) warmup iters: %d iters: %d "
                "agg iters: 1 validation: %d graph: %d\n",
                job.gpus_per_process, static_cast<unsigned long long>(o.min_bytes),
                static_cast<unsigned long long>(o.max_bytes),
                static_cast<unsigned long long>(o.step > 0 ? o.step : o.factor), o.step > 0 ? "bytes" : "factor",
                o.warmup, o.iters, o.check ? 1 : 0, o.graph_launches);
  os << line << blockingNote(o.blocking);
  os << "# Time across ranks: " << rankTimeName(o.rank_time) << " (-a " << static_cast<int>(o.rank_time) << ")\n";
  os << "#\n# Using devices\n";
  for (const auto& d : job.device_lines) os << d << "\n";
  os << "#\n";
  os << "#                                                              out-of-place                       in-place          \n";
  os << "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n";
  os << "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       \n";
  return os.str();
}

std::string formatCollectiveRow(const CollectiveBenchOptions& o, const CollectiveBenchRow& row) {
  char line[256];
  bool reducing = isReducing(o.collective);
  int root = hasRoot(o.collective) ? o.root : -1;
  std::snprintf(line, sizeof(line), "%12llu  %12llu  %8s  %6s  %6d", static_cast<unsigned long long>(row.bytes),
                static_cast<unsigned long long>(row.count), dtypeName(o.dtype),
                reducing ? reduceOpName(o.op) : "none", root);
  std::string out = line;
  for (int place : {kOutOfPlace, kInPlace}) {
    std::string wrong = row.wrong[place] < 0 ? "N/A" : std::to_string(row.wrong[place]);
    std::snprintf(line, sizeof(line), "  %7s  %6.2f  %6.2f  %5s", timeText(row.time_us[place]).c_str(),
                  row.algbw[place], row.busbw[place], wrong.c_str());
    out += line;
  }
  return out + "\n";
}

std::string formatCollectiveFooter(const std::vector<CollectiveBenchRow>& rows, bool check) {
  double sum = 0;
  int measured = 0;
  int64_t wrong = 0;
  for (const auto& row : rows) {
    for (int place : {kOutOfPlace, kInPlace}) {
      sum += row.busbw[place];
      ++measured;
      if (row.wrong[place] > 0) wrong += row.wrong[place];
    }
  }
  char line[128];
  std::ostringstream os;
  if (check) os << "# Out of bounds values : " << wrong << (wrong == 0 ? " OK" : " FAILED") << "\n";
  std::snprintf(line, sizeof(line), "# Avg bus bandwidth    : %g \n", measured ? sum / measured : 0.0);
  os << line << "#\n";
  return os.str();
}

std::string collectiveRowsJson(const CollectiveBenchOptions& o, const BenchJob& job,
                               const std::vector<CollectiveBenchRow>& rows) {
  nlohmann::json doc;
  doc["collective"] = collectiveName(o.collective);
  doc["backend"] = job.backend;
  doc["ranks"] = job.ranks();
  doc["processes"] = job.processes;
  doc["gpus_per_process"] = job.gpus_per_process;
  doc["devices"] = job.devices;
  doc["dtype"] = dtypeName(o.dtype);
  doc["op"] = isReducing(o.collective) ? reduceOpName(o.op) : "none";
  doc["iters"] = o.iters;
  doc["warmup"] = o.warmup;
  doc["average"] = static_cast<int>(o.rank_time);
  doc["blocking"] = o.blocking;
  doc["cuda_graph_launches"] = o.graph_launches;
  double sum = 0;
  nlohmann::json out_rows = nlohmann::json::array();
  for (const auto& row : rows) {
    nlohmann::json r;
    r["size"] = row.bytes;
    r["count"] = row.count;
    const char* names[2] = {"out_of_place", "in_place"};
    for (int place : {kOutOfPlace, kInPlace}) {
      nlohmann::json m;
      m["time_us"] = row.time_us[place];
      m["algbw_gbps"] = row.algbw[place];
      m["busbw_gbps"] = row.busbw[place];
      if (row.wrong[place] >= 0) m["wrong"] = row.wrong[place]; else m["wrong"] = nullptr;
      r[names[place]] = m;
      sum += row.busbw[place];
    }
    out_rows.push_back(r);
  }
  doc["rows"] = out_rows;
  doc["avg_busbw_gbps"] = rows.empty() ? 0.0 : sum / (2.0 * rows.size());
  return doc.dump(2) + "\n";
}

}  // namespace dtrain::bench
