#include "cli/plan_search.h"

#include <algorithm>
#include <limits>

#include <CLI/CLI.hpp>

#include "cli/option_binding.h"
#include "common/error.h"
#include "parallel/parallel_plan.h"
#include "train/train_memory.h"
#include "train/train_options.h"

namespace dtrain::cli {
namespace {

void addModelFlags(std::vector<std::string>& f, const PlanModel& m) {
  f.insert(f.end(), {"--model", m.name});
  const std::pair<const char*, int64_t> dims[] = {{"--layers", m.layers}, {"--dim", m.dim},
                                                  {"--heads", m.heads},   {"--kv-heads", m.kv_heads},
                                                  {"--ffn-dim", m.ffn_dim}, {"--vocab-size", m.vocab_size}};
  for (const auto& [flag, value] : dims) {
    if (value > 0) f.insert(f.end(), {flag, std::to_string(value)});
  }
  f.insert(f.end(), {"--dataset", "text", "--seq-len", std::to_string(m.seq_len)});
}

const char* shardWord(ShardStage s) {
  switch (s) {
    case ShardStage::kOptimizer: return "optimizer";
    case ShardStage::kGradients: return "gradients";
    case ShardStage::kFull: return "full";
    case ShardStage::kNone: break;
  }
  return "none";
}

std::vector<std::string> trainFlags(const PlanModel& m, const plan::Layout& l, int64_t tokens_per_step) {
  std::vector<std::string> f;
  addModelFlags(f, m);
  if (l.pp > 1) {
    // The pipeline's micro-batches make the step's batch: no accumulation.
    f.insert(f.end(), {"--batch-size", std::to_string(l.micro_batch * l.microbatches), "--pp", std::to_string(l.pp),
                       "--microbatches", std::to_string(l.microbatches)});
  } else {
    f.insert(f.end(), {"--batch-size", std::to_string(l.micro_batch)});
    if (l.microbatches > 1) f.insert(f.end(), {"--tokens-per-step", std::to_string(tokens_per_step)});
  }
  if (l.tp > 1) f.insert(f.end(), {"--tp", std::to_string(l.tp)});
  if (l.shard != ShardStage::kNone) f.insert(f.end(), {"--shard", shardWord(l.shard)});
  if (l.activation_checkpointing) f.emplace_back("--activation-checkpointing");
  f.insert(f.end(), {"--precision", l.fp8 ? "fp8" : "bf16"});
  if (l.fp8 && l.fp8_rowwise) f.insert(f.end(), {"--fp8-recipe", "rowwise"});
  return f;
}

// The flags as `dtrain train` parses and checks them, over `world` ranks;
// ConfigError (or CLI11's parse error) where dtrain would refuse them.
TrainOptions parsedTrainOptions(const std::vector<std::string>& flags, int world) {
  CLI::App app("dtrain train");
  auto bound = bindNew<TrainOptions>(app, "dtrain train (checked by dtrain plan)", declareTrainOptions);
  std::vector<std::string> reversed(flags.rbegin(), flags.rend());
  app.parse(reversed);
  TrainOptions o = withModelDefaults(bound->options);
  checkTrainOptions(o);
  planParallelism(o.parallel, world, plannedModel(o.model));
  return o;
}

}  // namespace

models::LanguageModelConfig planModelConfig(const PlanModel& model) {
  if (!models::isLanguageModelName(model.name)) {
    throw ConfigError("--model " + model.name + ": dtrain plan sizes language models (gpt2, gpt2-124m ... gpt2-1.5b, "
                      "llama, llama-1b, llama-3b, llama-8b, with --layers, --dim, ... over them)");
  }
  std::vector<std::string> flags;
  addModelFlags(flags, model);
  try {
    return languageModelConfig(parsedTrainOptions(flags, 1).model);
  } catch (const CLI::ParseError& e) {
    throw ConfigError("--model " + model.name + ": " + e.what());
  }
}

PlanSearch searchLayouts(const PlanModel& model, const plan::Cluster& cluster, int64_t tokens_per_step, bool fp8,
                         bool fp8_rowwise) {
  PlanSearch s;
  s.smallest_need = std::numeric_limits<int64_t>::max();
  const int world = cluster.gpus();
  const auto gpu_bytes = static_cast<int64_t>(cluster.gpu.memory_gib * 1073741824.0);
  for (int tp : {1, 2, 4, 8}) {
    if (tp > cluster.gpus_per_node || world % tp != 0) continue;
    for (int pp : {1, 2, 4, 8}) {
      if (world % (tp * pp) != 0) continue;
      const int dp = world / (tp * pp);
      for (ShardStage shard : {ShardStage::kNone, ShardStage::kOptimizer, ShardStage::kGradients, ShardStage::kFull}) {
        if (dp == 1 && shard != ShardStage::kNone) continue;  // sharding over one rank is none
        for (bool checkpointing : {false, true}) {
          for (int64_t micro : {1, 2, 4, 8, 16}) {
            const int64_t per_micro = static_cast<int64_t>(dp) * micro * model.seq_len;
            if (tokens_per_step % per_micro != 0) continue;
            const int64_t microbatches = tokens_per_step / per_micro;
            if (pp > 1 && microbatches < pp) continue;
            plan::Layout l{tp, pp, dp, shard, micro, microbatches, checkpointing, fp8, fp8 && fp8_rowwise};
            ++s.tried;
            PlannedLayout p{l, trainFlags(model, l, tokens_per_step), 0, 0, {}};
            TrainOptions o;
            try {
              o = parsedTrainOptions(p.train_flags, world);
            } catch (const ConfigError&) {
              ++s.refused;
              continue;
            } catch (const CLI::ParseError&) {
              ++s.refused;
              continue;
            }
            const models::LanguageModelConfig config = languageModelConfig(o.model);
            const MemoryInputs memory = lmMemoryInputs(o, config, world, /*cuda=*/true);
            p.memory_bytes = estimateMemory(memory).total();
            p.needed_bytes = neededDeviceBytes(memory, gpu_bytes);
            s.smallest_need = std::min(s.smallest_need, p.needed_bytes);
            if (p.needed_bytes > gpu_bytes) {
              ++s.too_big;
              continue;
            }
            p.time = plan::predictStep(config, cluster, l, tokens_per_step, plan::stepTrafficBytes(memory, l));
            s.fitting.push_back(std::move(p));
          }
        }
      }
    }
  }
  return s;
}

double calibrationEfficiency(const PlanModel& model, const plan::GpuSpec& gpu, int64_t batch, double tokens_per_s) {
  const int64_t tokens = batch * model.seq_len;
  const plan::Layout l{1, 1, 1, ShardStage::kNone, batch, 1, false, false, false};
  const TrainOptions o = parsedTrainOptions(trainFlags(model, l, tokens), 1);
  const models::LanguageModelConfig config = languageModelConfig(o.model);
  const MemoryInputs memory = lmMemoryInputs(o, config, 1, /*cuda=*/true);
  return plan::fittedEfficiency(config, gpu, tokens, plan::stepTrafficBytes(memory, l), tokens_per_s);
}

}  // namespace dtrain::cli
