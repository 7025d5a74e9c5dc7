// `dtrain plan`: before a run, the layouts of a language model's training
// on a cluster that fit its GPUs, with memory per GPU, predicted tokens/s
// and MFU, time to train, GPU-hours and cost -- cloud prices against owning
// the cluster -- ranked by time or cost, and the best as the command line
// that runs it (cli/plan_search.h, plan/step_model.h, plan/run_cost.h).
//   dtrain plan --model llama-8b --nodes 4 --gpus-per-node 8 --gpu h100 --train-tokens 1e11
//       --price on-demand=3.9,spot=2.1 --capex 300000 --power-kw-per-node 10.2 --electricity-price 0.12
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/option_binding.h"
#include "cli/plan_calibrate.h"
#include "cli/plan_search.h"
#include "common/error.h"
#include "common/text.h"
#include "models/fp8_recipe.h"
#include "plan/calibration.h"
#include "plan/gpu_catalog.h"
#include "plan/memory_estimate.h"
#include "plan/run_cost.h"

namespace dtrain::cli {
namespace {

enum class PlanPrecision { kBf16, kFp8 };

struct PlanFlags {
  PlanModel model;
  int64_t tokens_per_step = int64_t{1} << 22;  // 4M tokens, Llama 3's batch
  double train_tokens = 0;
  int gpus = 0;
  int nodes = 0;
  int gpus_per_node = 8;
  std::string gpu = "h100";
  PlanPrecision precision = PlanPrecision::kBf16;
  models::Fp8Recipe fp8_recipe = models::Fp8Recipe::kTensorwise;
  double efficiency = 0;  // 0: the calibration's, else plan::kDefaultEfficiency
  double intra_node_gbs = 0;
  bool calibrate = false;
  std::string calibration;  // "": plan::defaultCalibrationPath()
  double inter_node_gbs = 45;
  std::string prices;
  plan::OnPremises site;
  int top = 10;
  bool json = false;
  std::string rdzv_endpoint = "NODE0:29400";
};

void declarePlanOptions(OptionSet& set, PlanFlags& f) {
  set.text("--model", f.model.name, "The language model (required): gpt2[-124m|-350m|-774m|-1.5b] or llama[-1b|-3b|-8b]");
  const auto dimension = [&set](const char* name, int64_t& field, const char* help) {
    set.integer(name, field, help).range(1, int64_t{1} << 24).defaultMeans("the model's");
  };
  dimension("--layers", f.model.layers, "Transformer blocks");
  dimension("--dim", f.model.dim, "Width of the residual stream");
  dimension("--heads", f.model.heads, "Attention heads");
  dimension("--kv-heads", f.model.kv_heads, "Key/value heads (llama)");
  dimension("--ffn-dim", f.model.ffn_dim, "Hidden width of the MLP");
  dimension("--vocab-size", f.model.vocab_size, "Vocabulary");
  set.integer("--seq-len", f.model.seq_len, "Tokens per sequence").range(1, int64_t{1} << 24);
  set.integer("--tokens-per-step", f.tokens_per_step, "Global batch: tokens of one optimizer step over all GPUs")
      .range(1, int64_t{1} << 40);
  set.number("--train-tokens", f.train_tokens, "Tokens to train on (e.g. 1e11): time, GPU-hours and cost (0: none)")
      .atLeast(0);
  set.integer("--gpus", f.gpus, "GPUs in all (one node up to --gpus-per-node; else whole nodes)")
      .range(1, 1 << 20).defaultMeans("--nodes x --gpus-per-node");
  set.integer("--nodes", f.nodes, "Nodes").range(1, 1 << 16).defaultMeans("1");
  set.integer("--gpus-per-node", f.gpus_per_node, "GPUs per node").range(1, 64);
  set.text("--gpu", f.gpu, "The GPU, from dtrain's table: h100, h200, b200, a100-80g, a100-40g, l40s");
  set.choice("--precision", f.precision, {{"bf16", PlanPrecision::kBf16}, {"fp8", PlanPrecision::kFp8}},
             "The products' precision (fp8: GPUs with FP8 tensor cores)");
  set.choice("--fp8-recipe", f.fp8_recipe,
             {{"tensorwise", models::Fp8Recipe::kTensorwise}, {"rowwise", models::Fp8Recipe::kRowwise}},
             "How --precision fp8 scales: one scale per tensor, or per row (priced at its measured speed; "
             "compute capability 9.0 or newer)");
  set.number("--efficiency", f.efficiency, "Share of the GPU's bf16 peak the matrix products reach")
      .range(0.01, 1).defaultMeans("the calibration's for --gpu, else 0.6 (llama-1b on an H200)");
  set.number("--intra-node-gbs", f.intra_node_gbs, "All-reduce bus bandwidth inside a node, GB/s")
      .range(0.001, 1e6).defaultMeans("the calibration's for --gpu, else the GPU's");
  set.toggle("--calibrate", f.calibrate,
             "Measure this machine's GPUs instead of planning: dtrain bench train (llama-1b, one GPU) and, with "
             "several GPUs, dtrain bench allreduce at 1 GiB; the fitted efficiency and bus bandwidth go to "
             "--calibration, which later plans for the same --gpu read");
  set.path("--calibration", f.calibration,
           "The calibration file --calibrate writes and plans read (default: "
           "$XDG_CONFIG_HOME/dtrain/plan-calibration.json, else ~/.config/dtrain/plan-calibration.json)");
  set.number("--inter-node-gbs", f.inter_node_gbs, "Bus bandwidth per GPU across nodes, GB/s (400 Gb/s NICs: ~45)")
      .range(0.001, 1e6);
  set.text("--price", f.prices,
           "Cloud prices per GPU-hour, e.g. on-demand=3.9,spot=2.1,committed=2.6 (any names, $ or any currency)");
  set.number("--capex", f.site.capex_per_node, "Owning: purchase price per node (0: no ownership column)").atLeast(0);
  set.number("--power-kw-per-node", f.site.power_kw_per_node, "Owning: power draw per node, kW").atLeast(0);
  set.number("--electricity-price", f.site.electricity_per_kwh, "Owning: price per kWh").atLeast(0);
  set.number("--maintenance-per-year", f.site.maintenance_per_node_year, "Owning: maintenance per node per year")
      .atLeast(0);
  set.number("--years", f.site.years, "Owning: years the cluster is written off over").range(0.1, 100);
  set.number("--utilization", f.site.utilization, "Owning: share of the hours the GPUs do paid work").range(0.01, 1);
  set.integer("--top", f.top, "Layouts to list").range(1, 1000);
  set.toggle("--json", f.json, "One JSON object instead of the table");
  set.text("--rdzv-endpoint", f.rdzv_endpoint, "The rendezvous endpoint written into the command line");
}

std::vector<std::pair<std::string, double>> parsePrices(const std::string& text) {
  std::vector<std::pair<std::string, double>> prices;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    double value = -1;
    try {
      size_t used = 0;
      if (eq != std::string::npos) value = std::stod(item.substr(eq + 1), &used);
      if (eq == std::string::npos || eq == 0 || used != item.size() - eq - 1) value = -1;
    } catch (const std::exception&) {
      value = -1;
    }
    if (!(value >= 0) || !std::isfinite(value)) {
      throw ConfigError("--price '" + item + "': expected NAME=PRICE with a price >= 0 per GPU-hour, e.g. "
                        "on-demand=3.9");
    }
    prices.emplace_back(item.substr(0, eq), value);
  }
  return prices;
}

plan::Cluster clusterOf(const PlanFlags& f) {
  plan::Cluster c;
  c.gpu = plan::gpuByName(f.gpu);
  c.gpus_per_node = f.gpus_per_node;
  if (f.gpus > 0 && f.nodes > 0 && f.gpus != f.nodes * f.gpus_per_node) {
    throw ConfigError("--gpus " + std::to_string(f.gpus) + " is not --nodes " + std::to_string(f.nodes) +
                      " x --gpus-per-node " + std::to_string(f.gpus_per_node) + "; give one or the other");
  }
  if (f.gpus > 0 && f.gpus <= f.gpus_per_node) {
    c.nodes = 1;
    c.gpus_per_node = f.gpus;
  } else if (f.gpus > 0) {
    if (f.gpus % f.gpus_per_node != 0) {
      throw ConfigError("--gpus " + std::to_string(f.gpus) + " fills no whole number of " +
                        std::to_string(f.gpus_per_node) + "-GPU nodes; expected a multiple of --gpus-per-node");
    }
    c.nodes = f.gpus / f.gpus_per_node;
  } else {
    c.nodes = std::max(1, f.nodes);
  }
  if (f.precision == PlanPrecision::kFp8 && c.gpu.fp8_tflops <= 0) {
    throw ConfigError("--precision fp8: the " + c.gpu.name + " has no FP8 tensor cores; expected --precision bf16");
  }
  if (f.fp8_recipe == models::Fp8Recipe::kRowwise) {
    if (f.precision != PlanPrecision::kFp8) {
      throw ConfigError("--fp8-recipe rowwise prices --precision fp8's products; this plan's precision is bf16 "
                        "(add --precision fp8 or drop --fp8-recipe)");
    }
    if (c.gpu.compute_capability < 90) {
      throw ConfigError("--fp8-recipe rowwise needs compute capability 9.0 or newer; the " + c.gpu.name + " has " +
                        std::to_string(c.gpu.compute_capability / 10) + "." +
                        std::to_string(c.gpu.compute_capability % 10) + " (expected --fp8-recipe tensorwise)");
    }
  }
  c.intra_node_gbs = f.intra_node_gbs;
  c.inter_node_gbs = f.inter_node_gbs;
  c.efficiency = f.efficiency > 0 ? f.efficiency : plan::kDefaultEfficiency;
  return c;
}

// The calibration file's constants over the defaults, where it is for
// this --gpu and the flags did not set them; what it did, as JSON
// ({"path", "used", and the file's fields or "why" not}).
nlohmann::json applyCalibration(const PlanFlags& f, plan::Cluster& c) {
  const std::string path = f.calibration.empty() ? plan::defaultCalibrationPath() : f.calibration;
  const std::optional<plan::Calibration> cal = plan::readCalibration(path);
  nlohmann::json out = {{"path", path}, {"used", false}};
  if (!cal) {
    if (!f.calibration.empty()) throw ConfigError("--calibration " + path + ": no such file; write it with --calibrate");
    out["why"] = "no calibration file";
    return out;
  }
  if (cal->gpu != c.gpu.name) {
    out["why"] = "it is for " + cal->gpu + ", not " + c.gpu.name;
    return out;
  }
  out = plan::calibrationJson(*cal);
  out["path"] = path;
  out["used"] = f.efficiency <= 0 || (f.intra_node_gbs <= 0 && cal->intra_node_gbs > 0);
  // The efficiency refitted to the file's measurement by this build's step
  // model (a file from a build with another memory term stays right).
  double efficiency = cal->efficiency;
  if (!cal->model.empty() && cal->seq_len > 0 && cal->batch_size > 0 && cal->tokens_per_s > 0) {
    efficiency = calibrationEfficiency({.name = cal->model, .seq_len = cal->seq_len}, c.gpu, cal->batch_size,
                                       cal->tokens_per_s);
    out["efficiency_in_file"] = cal->efficiency;
    out["efficiency"] = efficiency;
  }
  if (f.efficiency <= 0) c.efficiency = efficiency;
  if (f.intra_node_gbs <= 0 && cal->intra_node_gbs > 0) c.intra_node_gbs = cal->intra_node_gbs;
  return out;
}

std::string calibrationText(const nlohmann::json& cal) {
  if (!cal.value("used", false)) {
    return "defaults (calibration " + cal["path"].get<std::string>() + ": " + cal.value("why", "flags given") + ")";
  }
  char text[96];
  std::snprintf(text, sizeof(text), "efficiency %.3f%s", cal["efficiency"].get<double>(),
                cal["intra_node_gbs"].get<double>() > 0
                    ? (", all-reduce " + std::to_string(static_cast<int>(cal["intra_node_gbs"].get<double>())) +
                       " GB/s").c_str()
                    : "");
  return std::string("calibrated: ") + text + " from " + cal["path"].get<std::string>() + " (" +
         cal.value("gpu_name", "") + " on " + cal.value("host", "") + ", " + cal.value("date", "") + ")";
}

std::string layoutText(const plan::Layout& l) {
  const char* shard[] = {"none", "optimizer", "gradients", "full"};
  return "tp " + std::to_string(l.tp) + " x pp " + std::to_string(l.pp) + " x dp " + std::to_string(l.dp) +
         ", shard " + shard[static_cast<int>(l.shard)] + ", micro-batch " + std::to_string(l.micro_batch) + " x " +
         std::to_string(l.microbatches) + (l.activation_checkpointing ? ", checkpointing" : "");
}

std::string commandLine(const PlanFlags& f, const plan::Cluster& c, const PlannedLayout& p) {
  std::string line = "dtrain launch --nnodes " + std::to_string(c.nodes) + " --nproc-per-node " +
                     std::to_string(c.gpus_per_node);
  line += c.nodes > 1 ? " --rdzv-backend c10d --rdzv-endpoint " + f.rdzv_endpoint : std::string(" --standalone");
  line += " dtrain train";
  for (const std::string& flag : p.train_flags) line += " " + flag;
  return line;
}

std::string durationText(double seconds) {
  char text[48];
  if (seconds >= 86400) std::snprintf(text, sizeof(text), "%.1f days", seconds / 86400);
  else if (seconds >= 3600) std::snprintf(text, sizeof(text), "%.1f h", seconds / 3600);
  else std::snprintf(text, sizeof(text), "%.0f s", seconds);
  return text;
}

// No layout fits: why, and how many GPUs it would take (one node filled to
// --gpus-per-node first, then twice the nodes).
[[noreturn]] void nothingFits(const PlanFlags& f, const plan::Cluster& cluster, const PlanSearch& search, bool fp8) {
  std::string needs;
  plan::Cluster bigger = cluster;
  while (bigger.gpus() < 32768 && needs.empty()) {
    // One node filled to --gpus-per-node first, then twice the nodes.
    if (bigger.gpus_per_node < f.gpus_per_node) {
      bigger.gpus_per_node = std::min(f.gpus_per_node, bigger.gpus_per_node * 2);
    } else {
      bigger.nodes *= 2;
    }
    const int nodes = bigger.nodes;
    if (f.tokens_per_step % (static_cast<int64_t>(bigger.gpus()) * f.model.seq_len) != 0) break;
    if (!searchLayouts(f.model, bigger, f.tokens_per_step, fp8, f.fp8_recipe == models::Fp8Recipe::kRowwise)
             .fitting.empty()) {
      needs = "; it needs about " + std::to_string(bigger.gpus()) + " GPUs (" + std::to_string(nodes) + " x " +
              std::to_string(bigger.gpus_per_node) + ")";
    }
  }
  throw ConfigError(
      "no layout of --model " + f.model.name + " at seq " + std::to_string(f.model.seq_len) + " fits " +
      std::to_string(cluster.gpus()) + " x " + cluster.gpu.name + " (" + std::to_string(search.tried) +
      " tried: " + std::to_string(search.refused) + " refused by dtrain train, " + std::to_string(search.too_big) +
      " over memory" + (search.too_big > 0 ? ", the leanest needs " + gibText(search.smallest_need) + " per GPU"
                                           : std::string()) + ")" +
      (needs.empty() ? "; or one sequence per rank does not divide --tokens-per-step" : needs));
}

// The plan as JSON: the cluster, the search's counts, the cost of owning,
// and the first --top layouts with their costs and command lines.
nlohmann::json planJson(const PlanFlags& f, const plan::Cluster& cluster, const PlanSearch& search,
                        const std::vector<std::pair<std::string, double>>& prices) {
  const auto& list = search.fitting;
  const plan::OnPremises& site = f.site;
  const bool owning = site.given();
  const plan::Tco tco = owning ? plan::ownershipCost(site, cluster.nodes, cluster.gpus_per_node) : plan::Tco{};
  nlohmann::json out = {{"model", f.model.name}, {"seq_len", f.model.seq_len}, {"tokens_per_step", f.tokens_per_step},
                        {"gpu", cluster.gpu.name}, {"nodes", cluster.nodes}, {"gpus_per_node", cluster.gpus_per_node},
                        {"efficiency", cluster.efficiency}, {"tried", search.tried}, {"refused", search.refused},
                        {"over_memory", search.too_big}, {"layouts", nlohmann::json::array()}};
  if (owning) {
    out["ownership"] = {{"capex", tco.capex}, {"power_per_year", tco.power_per_year},
                        {"maintenance_per_year", tco.maintenance_per_year}, {"total", tco.total},
                        {"years", site.years}, {"utilization", site.utilization}, {"per_gpu_hour", tco.per_gpu_hour}};
    nlohmann::json breaks = nlohmann::json::object();
    for (const auto& [name, price] : prices) {
      breaks[name] = plan::breakEvenUtilization(site, cluster.nodes, cluster.gpus_per_node, price);
    }
    out["ownership"]["break_even_utilization"] = breaks;
  }
  const int shown = std::min<int>(f.top, static_cast<int>(list.size()));
  for (int i = 0; i < shown; ++i) {
    const PlannedLayout& p = list[static_cast<size_t>(i)];
    nlohmann::json j = {{"layout", layoutText(p.layout)}, {"tp", p.layout.tp}, {"pp", p.layout.pp},
                        {"dp", p.layout.dp}, {"micro_batch", p.layout.micro_batch},
                        {"microbatches", p.layout.microbatches},
                        {"activation_checkpointing", p.layout.activation_checkpointing},
                        {"memory_gib_per_gpu", static_cast<double>(p.memory_bytes) / 1073741824.0},
                        {"memory_needed_gib_per_gpu", static_cast<double>(p.needed_bytes) / 1073741824.0},
                        {"step_s", p.time.step_s}, {"tokens_per_s", p.time.tokens_per_s}, {"mfu", p.time.mfu},
                        {"exposed_communication_s", p.time.exposed_s}, {"bubble_s", p.time.bubble_s},
                        {"command", commandLine(f, cluster, p)}};
    if (f.train_tokens > 0) {
      const double seconds = f.train_tokens / p.time.tokens_per_s;
      const double gpu_hours = seconds / 3600 * cluster.gpus();
      j["time_to_train_s"] = seconds;
      j["gpu_hours"] = gpu_hours;
      for (const auto& [name, price] : prices) j["cost"][name] = gpu_hours * price;
      if (owning) j["cost"]["owned"] = gpu_hours * tco.per_gpu_hour;
    }
    out["layouts"].push_back(j);
  }
  return out;
}

// The plan as a table, the cost of owning against each price, and the
// fastest layout's command line.
void printPlan(const PlanFlags& f, const plan::Cluster& cluster, const PlanSearch& search,
               const std::vector<std::pair<std::string, double>>& prices, const nlohmann::json& out) {
  const auto& list = search.fitting;
  const plan::OnPremises& site = f.site;
  const bool owning = site.given();
  const plan::Tco tco = owning ? plan::ownershipCost(site, cluster.nodes, cluster.gpus_per_node) : plan::Tco{};
  const int shown = static_cast<int>(out["layouts"].size());
  std::printf("# dtrain plan: %s, seq %lld, %lld tokens per step, on %d x %s (%d node(s) x %d); %d layouts tried, "
              "%d refused by dtrain train, %d over memory, %zu fit\n",
              f.model.name.c_str(), static_cast<long long>(f.model.seq_len),
              static_cast<long long>(f.tokens_per_step), cluster.gpus(), cluster.gpu.name.c_str(), cluster.nodes,
              cluster.gpus_per_node, search.tried, search.refused, search.too_big, list.size());
  std::printf("# predicted at %.0f%% of the bf16 peak for the products (--efficiency); memory: dtrain's estimate "
              "of the allocator's peak, which fits with a 1 GiB + 5%% margin\n", 100 * cluster.efficiency);
  std::printf("# constants: %s\n", calibrationText(out["calibration"]).c_str());
  std::string header = "| # | layout | GiB/GPU | tokens/s | MFU |";
  if (f.train_tokens > 0) {
    header += " time | GPU-hours |";
    for (const auto& [name, price] : prices) header += " " + name + " |";
    if (owning) header += " owned |";
  }
  std::printf("%s\n", header.c_str());
  std::string rule = "|---|---|---:|---:|---:|";
  if (f.train_tokens > 0) rule += std::string("---:|---:|") + [&] {
    std::string r;
    for (size_t i = 0; i < prices.size() + (owning ? 1 : 0); ++i) r += "---:|";
    return r;
  }();
  std::printf("%s\n", rule.c_str());
  for (int i = 0; i < shown; ++i) {
    const nlohmann::json& j = out["layouts"][static_cast<size_t>(i)];
    std::printf("| %d | %s | %.1f | %.0f | %.1f%% |", i + 1, j["layout"].get<std::string>().c_str(),
                j["memory_gib_per_gpu"].get<double>(), j["tokens_per_s"].get<double>(), 100 * j["mfu"].get<double>());
    if (f.train_tokens > 0) {
      std::printf(" %s | %.0f |", durationText(j["time_to_train_s"].get<double>()).c_str(),
                  j["gpu_hours"].get<double>());
      for (const auto& [name, price] : prices) std::printf(" %.0f |", j["cost"][name].get<double>());
      if (owning) std::printf(" %.0f |", j["cost"]["owned"].get<double>());
    }
    std::printf("\n");
  }
  if (owning) {
    std::printf("# owning %d node(s): %.0f purchase + %.1f years x (%.0f power + %.0f maintenance a year) = %.0f; "
                "%.2f per GPU-hour at %.0f%% utilisation\n",
                cluster.nodes, tco.capex, site.years, tco.power_per_year, tco.maintenance_per_year, tco.total,
                tco.per_gpu_hour, 100 * site.utilization);
    for (const auto& [name, price] : prices) {
      const double u = plan::breakEvenUtilization(site, cluster.nodes, cluster.gpus_per_node, price);
      std::printf("# against %s at %.2f per GPU-hour: owning is cheaper above %.0f%% utilisation%s\n", name.c_str(),
                  price, 100 * u, u > 1 ? " (never)" : "");
    }
  }
  std::printf("# the fastest:\n%s\n", out["layouts"][0]["command"].get<std::string>().c_str());
}

int runPlan(const PlanFlags& f) {
  if (f.calibrate) return runPlanCalibrate(f.calibration.empty() ? plan::defaultCalibrationPath() : f.calibration);
  if (f.model.name.empty()) throw ConfigError("dtrain plan needs --model, e.g. --model llama-8b");
  plan::Cluster cluster = clusterOf(f);
  const nlohmann::json calibration = applyCalibration(f, cluster);
  const auto prices = parsePrices(f.prices);
  if (f.site.given() && f.site.power_kw_per_node <= 0) {
    throw ConfigError("--capex needs --power-kw-per-node (and --electricity-price) for the cost of owning");
  }
  planModelConfig(f.model);  // a bad model flag is named before the search
  const bool fp8 = f.precision == PlanPrecision::kFp8;
  PlanSearch search =
      searchLayouts(f.model, cluster, f.tokens_per_step, fp8, f.fp8_recipe == models::Fp8Recipe::kRowwise);
  if (search.fitting.empty()) nothingFits(f, cluster, search, fp8);
  auto& list = search.fitting;
  // Every layout uses the whole cluster, so its GPU-hours, and its cost at
  // any one price, follow its time: both orders are the fastest first,
  // ties going to the layout that needs the least memory.
  std::stable_sort(list.begin(), list.end(), [](const PlannedLayout& a, const PlannedLayout& b) {
    if (a.time.step_s != b.time.step_s) return a.time.step_s < b.time.step_s;
    return a.memory_bytes < b.memory_bytes;
  });
  nlohmann::json out = planJson(f, cluster, search, prices);
  out["calibration"] = calibration;
  if (f.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  printPlan(f, cluster, search, prices, out);
  return 0;
}

}  // namespace

void registerPlan(CLI::App& app, ExitCode& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "plan", "Before a run: the layouts of a language model's training on a cluster that fit its GPUs, with memory "
              "per GPU, predicted tokens/s, MFU, time to train, GPU-hours and cost (cloud prices or owning), and "
              "the command line of the best");
  auto bound = bindNew<PlanFlags>(*cmd, "dtrain plan", declarePlanOptions);
  cmd->callback([bound, &exit_code] { exit_code.value = runPlan(bound->options); });
}

}  // namespace dtrain::cli
