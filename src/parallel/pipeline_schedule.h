// Pipeline schedules as data: for each of the pp ranks of a pipeline, the
// ordered list of what it computes for each micro-batch, and a simulator
// that plays the lists against one another (torch-free; the pipeline's
// runtime executes these lists, --pp-print-schedule prints them).
//
//   PipelineSchedule s = buildPipelineSchedule(PipelineScheduleKind::kInterleaved1F1B, 4, 8, 2);
//   ScheduleSimulation run = simulatePipelineSchedule(s);   // run.bubble ~ (p-1)/(V*M + p-1)
//
// The model's blocks are cut into S = pp x V stages; stage s lives on rank
// s % pp as that rank's chunk s / pp (Megatron-LM's interleaving: rank r
// holds stages r, r + pp, ...). Micro-batch m goes forward through stages
// 0 .. S-1 and backward through S-1 .. 0.
//
// The schedules:
// - gpipe: every forward, then every backward (Huang et al. 2019).
// - 1f1b: warm-up forwards (pp - 1 - r on rank r), then one forward and
//   one backward in turn, then the remaining backwards (PipeDream-flush;
//   Narayanan et al. 2021); at most pp - r micro-batches in flight.
// - interleaved-1f1b: 1f1b over V chunks per rank in Megatron-LM's order
//   (micro-batches in groups of pp per chunk); needs M a multiple of pp.
// - zb-h1: 1f1b with each backward split into the input gradient (I, what
//   the previous stage waits for) and the weight gradient (W, which
//   nothing waits for); a rank keeps up to pp W's back and runs them where
//   1f1b would wait (Qi et al. 2023, "Zero Bubble Pipeline Parallelism",
//   ZB-H1): 1f1b's micro-batches in flight, plus the weight gradients'
//   inputs of up to pp micro-batches; bubble (pp - 1) / (3 M + pp - 1)
//   with F = I = W.
//
// Contract:
// - buildPipelineSchedule throws ConfigError naming the numbers for pp < 1,
//   M < 1, V < 1, V > 1 with a schedule other than interleaved-1f1b, M < pp
//   for 1f1b, interleaved-1f1b and zb-h1 (their steady state needs pp
//   micro-batches in flight), and M not a multiple of pp for
//   interleaved-1f1b.
// - Every schedule it returns holds, on the rank of each stage, exactly one
//   forward and one backward (or one input- and one weight-gradient part)
//   per micro-batch, each forward before its backward; simulated with
//   sends that never block and receives that wait for their producer, it
//   never deadlocks (checkPipelineSchedule proves both for any lists).
#pragma once

#include <string>
#include <vector>

namespace dtrain {

enum class PipelineScheduleKind { kGpipe, k1F1B, kInterleaved1F1B, kZeroBubbleH1 };

// "gpipe", "1f1b", "interleaved-1f1b", "zb-h1": the --pp-schedule words.
const char* pipelineScheduleName(PipelineScheduleKind kind);
// ConfigError naming the word and the choices for any other.
PipelineScheduleKind parsePipelineSchedule(const std::string& word);

struct PipelineAction {
  enum class Op {
    kForward,         // F
    kBackward,        // B: input and weight gradients together
    kBackwardInput,   // I: the input gradient only (zb-h1)
    kBackwardWeight,  // W: the weight gradient only (zb-h1)
  };
  Op op = Op::kForward;
  int microbatch = 0;
  int chunk = 0;  // which of the rank's V stages: stage chunk x pp + rank

  bool operator==(const PipelineAction&) const = default;
};

struct PipelineSchedule {
  PipelineScheduleKind kind = PipelineScheduleKind::k1F1B;
  int pp = 1;
  int microbatches = 1;
  int virtual_stages = 1;  // V: stages per rank
  std::vector<std::vector<PipelineAction>> ranks;  // each rank's actions, in order

  int stages() const { return pp * virtual_stages; }
  int stageOf(int rank, int chunk) const { return chunk * pp + rank; }
};

PipelineSchedule buildPipelineSchedule(PipelineScheduleKind kind, int pp, int microbatches, int virtual_stages = 1);

// "F3", "B3", "I3", "W3"; with V > 1 the chunk after a dot: "F3.1".
std::string actionText(const PipelineAction& action, int virtual_stages);
// One line per rank: "rank 0: F0 F1 B0 F2 B1 B2", under a header naming
// the schedule and its sizes.
std::string formatPipelineSchedule(const PipelineSchedule& schedule);

// How long each action takes in the simulation, per stage (a rank's
// chunk is 1/V of its blocks, so the same costs hold for any V when they
// are given per stage). A whole backward costs input + weight.
struct ScheduleCosts {
  double forward = 1;
  double backward_input = 1;
  double backward_weight = 1;
};

struct ScheduleSimulation {
  bool deadlock = false;
  std::string why;                  // the deadlock or the broken rule, named
  double makespan = 0;              // from the first start to the last end
  std::vector<double> busy;         // per rank
  double bubble = 0;                // idle over makespan, averaged over the ranks
  // Per rank, each action's start time in list order (for the timeline).
  std::vector<std::vector<double>> starts;
};

// Plays the lists: each rank runs its actions in order, an action starting
// once the rank is free and its inputs exist (F of stage s: F of s - 1;
// B or I of s: F of s on this rank and B or I of s + 1, or F of s at the
// last stage; W of s: I of s). Checks the lists first (checkPipelineSchedule)
// and reports a broken rule or a deadlock in `why`, never throws for them.
ScheduleSimulation simulatePipelineSchedule(const PipelineSchedule& schedule, const ScheduleCosts& costs = {});

// "" when every (micro-batch, stage) has one forward and one backward (or
// one I and one W) on the stage's rank, each forward before its backward
// and each I before its W; else what is wrong, naming rank and action.
std::string checkPipelineSchedule(const PipelineSchedule& schedule);

// The simulated timeline, one row per rank, a column per unit of time
// (costs rounded to whole units): each action's text, "." where idle.
std::string formatPipelineTimeline(const PipelineSchedule& schedule, const ScheduleCosts& costs = {});

// The bubble of 1f1b and interleaved-1f1b with equal stages:
// (pp - 1) / (V x M + pp - 1).
double theoreticalPipelineBubble(int pp, int microbatches, int virtual_stages = 1);

// The blocks of one pipeline stage: first .. end - 1.
struct StageBlocks {
  int first = 0;
  int end = 0;
  int count() const { return end - first; }
  bool operator==(const StageBlocks&) const = default;
};

// Cuts `blocks` transformer blocks into `stages` contiguous stages of at
// least one block each so that the costliest stage is as cheap as can be
// and, of such cuts, the stages' costs are the most even (the smallest sum
// of their squares). A block costs block_cost;
// the first stage also costs first_cost (the embedding), the last also
// last_cost (the final norm, the head and the loss). ConfigError naming
// the numbers when there are more stages than blocks.
std::vector<StageBlocks> balancePipelineStages(int blocks, int stages, double block_cost, double first_cost,
                                               double last_cost);

// --pp-split "5,5,6": each stage's block count, first to last.
// ConfigError naming the text unless it lists `stages` counts of at least
// one block that add up to `blocks`.
std::vector<StageBlocks> parsePipelineSplit(const std::string& text, int blocks, int stages);

// "0-4 | 5-9 | 10-15" (each stage's first and last block).
std::string formatPipelineStages(const std::vector<StageBlocks>& stages);

}  // namespace dtrain
