#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <sstream>
#include <tuple>

#include "common/error.h"

namespace dtrain {
namespace {

using Op = PipelineAction::Op;

PipelineAction forward(int m, int chunk = 0) { return {Op::kForward, m, chunk}; }
PipelineAction backward(int m, int chunk = 0) { return {Op::kBackward, m, chunk}; }

std::vector<PipelineAction> gpipe(int microbatches) {
  std::vector<PipelineAction> out;
  for (int m = 0; m < microbatches; ++m) out.push_back(forward(m));
  for (int m = 0; m < microbatches; ++m) out.push_back(backward(m));
  return out;
}

std::vector<PipelineAction> oneForwardOneBackward(int pp, int rank, int microbatches) {
  const int warmup = std::min(pp - 1 - rank, microbatches);
  std::vector<PipelineAction> out;
  for (int m = 0; m < warmup; ++m) out.push_back(forward(m));
  for (int i = 0; i + warmup < microbatches; ++i) {
    out.push_back(forward(warmup + i));
    out.push_back(backward(i));
  }
  for (int m = microbatches - warmup; m < microbatches; ++m) out.push_back(backward(m));
  return out;
}

// Megatron-LM's interleaved order: the k-th forward (backward) of a rank
// runs micro-batch (k / (pp V)) pp + k % pp of chunk (k % (pp V)) / pp
// (backward: the chunks in reverse).
std::vector<PipelineAction> interleaved(int pp, int rank, int microbatches, int chunks) {
  const int total = microbatches * chunks;
  const int warmup = std::min((pp - rank - 1) * 2 + (chunks - 1) * pp, total);
  const auto action = [&](int k, bool is_forward) {
    const int group = pp * chunks;
    int chunk = (k % group) / pp;
    if (!is_forward) chunk = chunks - 1 - chunk;
    const int m = (k / group) * pp + k % pp;
    return PipelineAction{is_forward ? Op::kForward : Op::kBackward, m, chunk};
  };
  std::vector<PipelineAction> out;
  for (int k = 0; k < warmup; ++k) out.push_back(action(k, true));
  for (int k = 0; k + warmup < total; ++k) {
    out.push_back(action(k + warmup, true));
    out.push_back(action(k, false));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(action(k, false));
  return out;
}

// 1f1b with each backward split, the lists drawn by playing the pipeline
// with unit costs: a rank that is free runs, in this order of preference,
// the next input gradient I once its inputs exist, else the next forward
// while fewer than pp - r micro-batches await their I (1f1b's bound), else
// the oldest weight gradient W it holds back; it holds at most pp W's (an
// I with that many held runs a W first). The W's so fill the time 1f1b's
// ranks spend waiting for the next stage's input gradient: with equal F, I
// and W the bubble is the paper's (pp - 1) / (3 M + pp - 1), a third of
// 1f1b's in time. (Holding pp - r W's, as many as 1f1b's micro-batches in
// flight, leaves up to 1.8 times that bubble.)
std::vector<std::vector<PipelineAction>> zeroBubbleH1(int pp, int microbatches) {
  struct Rank {
    int next_forward = 0, next_input = 0;
    std::deque<int> held;  // micro-batches whose W has not run
    int free_at = 0;
    std::vector<int> forward_end, input_end;  // per micro-batch, -1 until done
  };
  std::vector<Rank> ranks(static_cast<size_t>(pp));
  for (Rank& r : ranks) {
    r.forward_end.assign(static_cast<size_t>(microbatches), -1);
    r.input_end.assign(static_cast<size_t>(microbatches), -1);
  }
  std::vector<std::vector<PipelineAction>> lists(static_cast<size_t>(pp));
  const auto doneBy = [](int end, int t) { return end >= 0 && end <= t; };
  const auto finished = [&](const Rank& r) {
    return r.next_forward == microbatches && r.next_input == microbatches && r.held.empty();
  };
  for (int t = 0; !std::all_of(ranks.begin(), ranks.end(), finished); ++t) {
    for (int q = 0; q < pp; ++q) {
      Rank& r = ranks[static_cast<size_t>(q)];
      if (r.free_at > t || finished(r)) continue;
      auto& list = lists[static_cast<size_t>(q)];
      const int m = r.next_input;
      const bool input_ready = m < microbatches && doneBy(r.forward_end[static_cast<size_t>(m)], t) &&
                               (q == pp - 1 || doneBy(ranks[static_cast<size_t>(q + 1)].input_end[static_cast<size_t>(m)], t));
      const int f = r.next_forward;
      const bool forward_ready = f < microbatches && f - r.next_input < pp - q &&
                                 (q == 0 || doneBy(ranks[static_cast<size_t>(q - 1)].forward_end[static_cast<size_t>(f)], t));
      if (input_ready && static_cast<int>(r.held.size()) < pp) {
        list.push_back({Op::kBackwardInput, m, 0});
        r.input_end[static_cast<size_t>(m)] = t + 1;
        r.held.push_back(m);
        ++r.next_input;
      } else if (!input_ready && forward_ready) {
        list.push_back(forward(f));
        r.forward_end[static_cast<size_t>(f)] = t + 1;
        ++r.next_forward;
      } else if (!r.held.empty()) {
        list.push_back({Op::kBackwardWeight, r.held.front(), 0});
        r.held.pop_front();
      } else {
        continue;  // idle until the next unit
      }
      r.free_at = t + 1;
    }
  }
  return lists;
}

void checkSizes(PipelineScheduleKind kind, int pp, int microbatches, int virtual_stages) {
  const std::string name = pipelineScheduleName(kind);
  if (pp < 1) throw ConfigError("--pp " + std::to_string(pp) + ": expected at least 1 pipeline stage");
  if (microbatches < 1) {
    throw ConfigError("--microbatches " + std::to_string(microbatches) + ": expected at least 1 micro-batch per step");
  }
  if (virtual_stages < 1) {
    throw ConfigError("--virtual-stages " + std::to_string(virtual_stages) + ": expected at least 1 stage per rank");
  }
  if (virtual_stages > 1 && kind != PipelineScheduleKind::kInterleaved1F1B) {
    throw ConfigError("--virtual-stages " + std::to_string(virtual_stages) + " with --pp-schedule " + name +
                      ": only interleaved-1f1b runs several stages per rank; expected --virtual-stages 1 or "
                      "--pp-schedule interleaved-1f1b");
  }
  if (kind != PipelineScheduleKind::kGpipe && microbatches < pp) {
    throw ConfigError("--microbatches " + std::to_string(microbatches) + " with --pp " + std::to_string(pp) +
                      " and --pp-schedule " + name + ": fewer micro-batches than stages never fill the pipeline; "
                      "expected --microbatches >= " + std::to_string(pp) + " (or --pp-schedule gpipe)");
  }
  if (kind == PipelineScheduleKind::kInterleaved1F1B && microbatches % pp != 0) {
    throw ConfigError("--microbatches " + std::to_string(microbatches) + " with --pp " + std::to_string(pp) +
                      " and --pp-schedule interleaved-1f1b: the micro-batches go through each chunk in groups of "
                      "pp; expected a multiple of " + std::to_string(pp));
  }
}

char opLetter(Op op) {
  switch (op) {
    case Op::kForward: return 'F';
    case Op::kBackward: return 'B';
    case Op::kBackwardInput: return 'I';
    case Op::kBackwardWeight: return 'W';
  }
  return '?';
}

// The events the simulator and the checker track: (kind, micro-batch, stage),
// kind 0 forward, 1 input gradient (B or I), 2 weight gradient (B or W).
using Event = std::tuple<int, int, int>;

}  // namespace

const char* pipelineScheduleName(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::kGpipe: return "gpipe";
    case PipelineScheduleKind::k1F1B: return "1f1b";
    case PipelineScheduleKind::kInterleaved1F1B: return "interleaved-1f1b";
    case PipelineScheduleKind::kZeroBubbleH1: return "zb-h1";
  }
  return "?";
}

PipelineScheduleKind parsePipelineSchedule(const std::string& word) {
  for (PipelineScheduleKind kind : {PipelineScheduleKind::kGpipe, PipelineScheduleKind::k1F1B,
                                    PipelineScheduleKind::kInterleaved1F1B, PipelineScheduleKind::kZeroBubbleH1}) {
    if (word == pipelineScheduleName(kind)) return kind;
  }
  throw ConfigError("--pp-schedule " + word + ": expected gpipe, 1f1b, interleaved-1f1b or zb-h1");
}

PipelineSchedule buildPipelineSchedule(PipelineScheduleKind kind, int pp, int microbatches, int virtual_stages) {
  checkSizes(kind, pp, microbatches, virtual_stages);
  PipelineSchedule s;
  s.kind = kind;
  s.pp = pp;
  s.microbatches = microbatches;
  s.virtual_stages = virtual_stages;
  for (int r = 0; r < pp; ++r) {
    switch (kind) {
      case PipelineScheduleKind::kGpipe: s.ranks.push_back(gpipe(microbatches)); break;
      case PipelineScheduleKind::k1F1B: s.ranks.push_back(oneForwardOneBackward(pp, r, microbatches)); break;
      case PipelineScheduleKind::kInterleaved1F1B:
        s.ranks.push_back(interleaved(pp, r, microbatches, virtual_stages));
        break;
      case PipelineScheduleKind::kZeroBubbleH1: break;
    }
  }
  if (kind == PipelineScheduleKind::kZeroBubbleH1) s.ranks = zeroBubbleH1(pp, microbatches);
  return s;
}

std::string actionText(const PipelineAction& action, int virtual_stages) {
  std::string text = opLetter(action.op) + std::to_string(action.microbatch);
  if (virtual_stages > 1) text += "." + std::to_string(action.chunk);
  return text;
}

std::string formatPipelineSchedule(const PipelineSchedule& schedule) {
  std::ostringstream out;
  out << "# " << pipelineScheduleName(schedule.kind) << ": pp " << schedule.pp << ", " << schedule.microbatches
      << " micro-batches";
  if (schedule.virtual_stages > 1) out << ", " << schedule.virtual_stages << " stages per rank (F3.1: chunk 1)";
  out << "; F forward, B backward, I input gradient, W weight gradient\n";
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    out << "rank " << r << ":";
    for (const PipelineAction& a : schedule.ranks[r]) out << ' ' << actionText(a, schedule.virtual_stages);
    out << '\n';
  }
  return out.str();
}

std::string checkPipelineSchedule(const PipelineSchedule& s) {
  if (static_cast<int>(s.ranks.size()) != s.pp) {
    return "the schedule has " + std::to_string(s.ranks.size()) + " ranks' lists for pp " + std::to_string(s.pp);
  }
  for (int r = 0; r < s.pp; ++r) {
    // Per (micro-batch, chunk): positions of F, B, I, W in this rank's list.
    std::map<std::pair<int, int>, std::vector<std::vector<int>>> seen;
    const auto where = [&](const PipelineAction& a) {
      return "rank " + std::to_string(r) + "'s " + actionText(a, s.virtual_stages);
    };
    for (size_t i = 0; i < s.ranks[r].size(); ++i) {
      const PipelineAction& a = s.ranks[r][i];
      if (a.microbatch < 0 || a.microbatch >= s.microbatches || a.chunk < 0 || a.chunk >= s.virtual_stages) {
        return where(a) + " names a micro-batch or chunk outside the schedule's sizes";
      }
      auto& positions = seen[{a.microbatch, a.chunk}];
      positions.resize(4);
      positions[static_cast<size_t>(a.op)].push_back(static_cast<int>(i));
    }
    for (int m = 0; m < s.microbatches; ++m) {
      for (int c = 0; c < s.virtual_stages; ++c) {
        const PipelineAction f{Op::kForward, m, c};
        auto it = seen.find({m, c});
        if (it == seen.end()) return where(f) + " is missing, and its backward";
        const auto& p = it->second;
        const size_t nf = p[0].size(), nb = p[1].size(), ni = p[2].size(), nw = p[3].size();
        if (nf != 1) return where(f) + " runs " + std::to_string(nf) + " times; expected once";
        const bool whole = nb == 1 && ni == 0 && nw == 0, split = nb == 0 && ni == 1 && nw == 1;
        if (!whole && !split) {
          return where(PipelineAction{Op::kBackward, m, c}) + ": expected one B, or one I and one W; found " +
                 std::to_string(nb) + " B, " + std::to_string(ni) + " I, " + std::to_string(nw) + " W";
        }
        const int first_backward = whole ? p[1][0] : p[2][0];
        if (first_backward < p[0][0]) return where(f) + " runs after its backward";
        if (split && p[3][0] < p[2][0]) return where(PipelineAction{Op::kBackwardWeight, m, c}) + " runs before its I";
      }
    }
  }
  return "";
}

ScheduleSimulation simulatePipelineSchedule(const PipelineSchedule& s, const ScheduleCosts& costs) {
  ScheduleSimulation sim;
  sim.why = checkPipelineSchedule(s);
  if (!sim.why.empty()) {
    sim.deadlock = true;
    return sim;
  }
  const int stages = s.stages();
  std::map<Event, double> done;  // end time of each event
  std::vector<size_t> next(static_cast<size_t>(s.pp), 0);
  std::vector<double> free_at(static_cast<size_t>(s.pp), 0);
  sim.busy.assign(static_cast<size_t>(s.pp), 0);
  sim.starts.assign(static_cast<size_t>(s.pp), {});
  // When the inputs of rank r's action a exist (negative: not yet).
  const auto ready = [&](int r, const PipelineAction& a) -> double {
    const int stage = s.stageOf(r, a.chunk);
    const auto at = [&](int kind, int st) {
      auto it = done.find({kind, a.microbatch, st});
      return it == done.end() ? -1.0 : it->second;
    };
    switch (a.op) {
      case Op::kForward: return stage == 0 ? 0.0 : at(0, stage - 1);
      case Op::kBackward:
      case Op::kBackwardInput: return stage == stages - 1 ? at(0, stage) : at(1, stage + 1);
      case Op::kBackwardWeight: return at(1, stage);
    }
    return -1;
  };
  const auto cost = [&](Op op) {
    switch (op) {
      case Op::kForward: return costs.forward;
      case Op::kBackward: return costs.backward_input + costs.backward_weight;
      case Op::kBackwardInput: return costs.backward_input;
      case Op::kBackwardWeight: return costs.backward_weight;
    }
    return 0.0;
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < s.pp; ++r) {
      const auto& list = s.ranks[static_cast<size_t>(r)];
      size_t& i = next[static_cast<size_t>(r)];
      while (i < list.size()) {
        const PipelineAction& a = list[i];
        const double inputs = ready(r, a);
        if (inputs < 0) break;
        const double start = std::max(free_at[static_cast<size_t>(r)], inputs);
        const double end = start + cost(a.op);
        sim.starts[static_cast<size_t>(r)].push_back(start);
        free_at[static_cast<size_t>(r)] = end;
        sim.busy[static_cast<size_t>(r)] += end - start;
        const int stage = s.stageOf(r, a.chunk);
        if (a.op == Op::kForward) done[{0, a.microbatch, stage}] = end;
        if (a.op == Op::kBackward || a.op == Op::kBackwardInput) done[{1, a.microbatch, stage}] = end;
        if (a.op == Op::kBackward || a.op == Op::kBackwardWeight) done[{2, a.microbatch, stage}] = end;
        ++i;
        progress = true;
      }
    }
  }
  for (int r = 0; r < s.pp; ++r) {
    const auto& list = s.ranks[static_cast<size_t>(r)];
    const size_t i = next[static_cast<size_t>(r)];
    if (i < list.size()) {
      sim.deadlock = true;
      sim.why += (sim.why.empty() ? "deadlock: " : "; ") + std::string("rank ") + std::to_string(r) + " waits at " +
                 actionText(list[i], s.virtual_stages) + " (action " + std::to_string(i + 1) + " of " +
                 std::to_string(list.size()) + ")";
    }
  }
  if (sim.deadlock) return sim;
  sim.makespan = *std::max_element(free_at.begin(), free_at.end());
  double idle = 0;
  for (double b : sim.busy) idle += sim.makespan > 0 ? (sim.makespan - b) / sim.makespan : 0;
  sim.bubble = idle / s.pp;
  return sim;
}

std::string formatPipelineTimeline(const PipelineSchedule& s, const ScheduleCosts& costs) {
  const ScheduleSimulation sim = simulatePipelineSchedule(s, costs);
  if (sim.deadlock) return "# no timeline: " + sim.why + "\n";
  const auto units = [](double t) { return static_cast<size_t>(std::llround(t)); };
  const size_t width = units(sim.makespan);
  std::vector<std::vector<std::string>> cells(static_cast<size_t>(s.pp), std::vector<std::string>(width, "."));
  size_t cell = 1;
  for (int r = 0; r < s.pp; ++r) {
    const auto& list = s.ranks[static_cast<size_t>(r)];
    for (size_t i = 0; i < list.size(); ++i) {
      const PipelineAction& a = list[i];
      const double d = a.op == PipelineAction::Op::kForward          ? costs.forward
                       : a.op == PipelineAction::Op::kBackwardInput  ? costs.backward_input
                       : a.op == PipelineAction::Op::kBackwardWeight ? costs.backward_weight
                                                                     : costs.backward_input + costs.backward_weight;
      const std::string text = actionText(a, s.virtual_stages);
      cell = std::max(cell, text.size());
      for (size_t u = units(sim.starts[static_cast<size_t>(r)][i]); u < units(sim.starts[static_cast<size_t>(r)][i] + d) && u < width; ++u) {
        cells[static_cast<size_t>(r)][u] = text;
      }
    }
  }
  std::ostringstream out;
  out << "# " << pipelineScheduleName(s.kind) << " timeline (F " << costs.forward << ", I " << costs.backward_input
      << ", W " << costs.backward_weight << " per stage): bubble " << std::lround(sim.bubble * 1000) / 10.0 << "%\n";
  for (int r = 0; r < s.pp; ++r) {
    out << "rank " << r << ":";
    for (const std::string& c : cells[static_cast<size_t>(r)]) out << ' ' << c << std::string(cell - c.size(), ' ');
    out << '\n';
  }
  return out.str();
}

double theoreticalPipelineBubble(int pp, int microbatches, int virtual_stages) {
  return static_cast<double>(pp - 1) / (static_cast<double>(virtual_stages) * microbatches + pp - 1);
}

std::vector<StageBlocks> balancePipelineStages(int blocks, int stages, double block_cost, double first_cost,
                                               double last_cost) {
  if (stages < 1 || stages > blocks) {
    throw ConfigError(std::to_string(stages) + " pipeline stages (--pp x --virtual-stages) for a model of " +
                      std::to_string(blocks) + " blocks: expected at most one stage per block");
  }
  // best[s][i]: blocks 0 .. i-1 in s stages, the costliest stage as cheap
  // as can be, then the squares of the stages' costs as small (the most
  // even of the equally good cuts); cut[s][i]: where its last stage begins.
  struct Cost {
    double worst = 1e300;
    double squares = 1e300;
  };
  auto better = [](const Cost& a, const Cost& b) {
    const double tolerance = 1e-9 * std::max(1.0, std::max(a.worst, b.worst));
    if (a.worst < b.worst - tolerance) return true;
    if (a.worst > b.worst + tolerance) return false;
    return a.squares < b.squares * (1 - 1e-12);
  };
  std::vector<std::vector<Cost>> best(stages + 1, std::vector<Cost>(blocks + 1));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(blocks + 1, 0));
  best[0][0] = {0, 0};
  for (int s = 1; s <= stages; ++s) {
    for (int i = s; i <= blocks; ++i) {
      for (int j = i - 1; j >= s - 1; --j) {  // the last stage is blocks j .. i-1; ties: the later j (earlier stages larger)
        const double cost =
            (i - j) * block_cost + (s == 1 ? first_cost : 0) + (s == stages && i == blocks ? last_cost : 0);
        const Cost candidate{std::max(best[s - 1][j].worst, cost), best[s - 1][j].squares + cost * cost};
        if (better(candidate, best[s][i])) {
          best[s][i] = candidate;
          cut[s][i] = j;
        }
      }
    }
  }
  std::vector<StageBlocks> out(stages);
  int end = blocks;
  for (int s = stages; s >= 1; --s) {
    out[s - 1] = {cut[s][end], end};
    end = cut[s][end];
  }
  return out;
}

std::vector<StageBlocks> parsePipelineSplit(const std::string& text, int blocks, int stages) {
  const std::string expected = "; expected " + std::to_string(stages) +
                               " comma-separated block counts of at least 1 that add up to the model's " +
                               std::to_string(blocks) + " blocks";
  std::vector<StageBlocks> out;
  std::stringstream in(text);
  std::string item;
  int next = 0;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int count = 0;
    try {
      count = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || count < 1) {
      throw ConfigError("--pp-split '" + text + "': '" + item + "' is not a block count" + expected);
    }
    out.push_back({next, next + count});
    next += count;
  }
  if (static_cast<int>(out.size()) != stages || next != blocks) {
    throw ConfigError("--pp-split '" + text + "' lists " + std::to_string(out.size()) + " stages of " +
                      std::to_string(next) + " blocks" + expected);
  }
  return out;
}

std::string formatPipelineStages(const std::vector<StageBlocks>& stages) {
  std::string out;
  for (size_t s = 0; s < stages.size(); ++s) {
    if (s > 0) out += " | ";
    out += std::to_string(stages[s].first) + "-" + std::to_string(stages[s].end - 1);
  }
  return out;
}

}  // namespace dtrain
