// PipelineModel: this rank's stages of a language model cut into a
// pipeline (--pp), and the runtime that plays a schedule
// (parallel/pipeline_schedule.h) over them.
//
//   PipelineModel stage(lm, options);   // collective over the pipeline's ranks
//   DataParallel dp(stage, dp_comm);    // the stage's parameters only
//   torch::Tensor loss = stage.forwardBackward(tokens, targets, &dp);
//
// Contract:
// - The model is built whole on every rank (the same seed: the same
//   weights as one rank would train). The stage keeps the parameters of
//   its blocks (each of its chunks' StageBlocks), the embedding with stage
//   0 and the final norm and head with the last stage, registered under
//   the whole model's names (a checkpoint's logical names); every other
//   parameter of the whole model is released (an empty tensor).
// - A tied head (gpt2's) is held by the first and the last stage: after
//   backward the two sum their gradients of it (tiedGradientSum), so both
//   step with the whole model's gradient.
// - forwardBackward splits the batch's rows into the schedule's M equal
//   micro-batches (ConfigError otherwise) and runs this rank's actions in
//   order: F embeds (stage 0) or receives the previous stage's residual
//   stream, runs the stage's blocks and sends the stream on, or at the last
//   stage computes the micro-batch's loss / M; B receives the gradient of
//   what F sent (or starts from the loss), runs backward and sends the
//   input's gradient back; I and W (zb-h1) are B's input gradient
//   (autograd::grad, keeping the graph) and its weight gradients
//   (backward over the stage's parameters). Every backward but the rank's
//   last runs under DataParallel::noSync, so gradients are reduced over
//   the data-parallel ranks once per step. Returns the micro-batches' mean
//   loss on the rank of the last stage, zero elsewhere (detached, float32).
// - Transfers: the residual stream [rows / M, positions, dim] in float32
//   (positions: seq / tp under sequence parallelism), shapes known ahead;
//   each kind (activations, gradients) and direction between two pipeline
//   ranks has a communicator of its own (options.channel), so every
//   channel carries messages in one order on both ends and a send never
//   waits behind a receive. Sends are asynchronous (the host and the
//   compute stream go on; on CUDA a side stream per channel), each
//   receive is waited for where its value is needed (on CUDA the compute
//   stream waits, not the host); the step's end waits for every send.
//   With sends that never block, the schedule's simulator proves the
//   lists deadlock-free.
// - Units (models::UnitHooks, for DataParallel: ZeRO-3's gathers, the start
//   of backward at the loss): shardingUnits() lists this rank's, unit 0
//   its root parameters (the embedding with stage 0, the final norm and
//   head with the last stage; none on a rank between) and then its blocks,
//   chunk by chunk. The hooks DataParallel sets on this model are called
//   with these numbers: each forward starts with unit 0's.
// - loss() is the pipelined forward of one batch (no backward, one
//   micro-batch) whose loss every pipeline rank returns (broadcast from the
//   last stage over options.group): evaluation works unchanged. forward()
//   throws ConfigError (no rank holds the whole model).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "comm/communicator.h"
#include "dtrain/amp.h"
#include "dtrain/data_parallel.h"
#include "models/language_model.h"
#include "parallel/pipeline_schedule.h"

namespace dtrain {

struct PipelineModelOptions {
  PipelineSchedule schedule;          // pp, M, V and this pipeline's action lists
  std::vector<StageBlocks> stages;    // schedule.stages() of them
  int rank = 0;                       // this rank's place in the pipeline (0 .. pp-1)
  // The communicator of two pipeline ranks that carries `kind`
  // ("activations" or "gradients") from `from` to `to` (its ranks 0 and 1).
  // Called by the constructor for this rank's channels, in an order every
  // rank shares (the pairs are collective).
  std::function<std::shared_ptr<Communicator>(int from, int to, const std::string& kind)> channel;
  std::shared_ptr<Communicator> group;  // the pipeline's ranks (rank = place): the loss's broadcast
  Precision precision = Precision::kFp32;
  int64_t sequence_divisor = 1;       // positions of a stream are seq / this (sequence parallelism)
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

class PipelineModel : public models::Model {
 public:
  // Collective over the pipeline's ranks (its channels). ConfigError when
  // the stages do not cover the model's blocks or the schedule is not of
  // pp ranks.
  PipelineModel(std::shared_ptr<models::LanguageModel> whole, PipelineModelOptions options);
  ~PipelineModel() override;

  torch::Tensor forward(torch::Tensor input) override;
  void train(bool on = true) override;
  torch::Tensor loss(const torch::Tensor& tokens, const torch::Tensor& targets) override;
  std::vector<torch::Tensor> noWeightDecayParameters() override;
  std::vector<std::vector<torch::Tensor>> shardingUnits() override;

  // One step's forward and backward (see the contract); dp may be null.
  // `phase` (if given) hears "pipeline wait" before each receive, then
  // "forward" or "backward" as the action computes (queued on the compute
  // stream as StepObserver phases are), and "pipeline wait" after the last.
  torch::Tensor forwardBackward(const torch::Tensor& tokens, const torch::Tensor& targets, DataParallel* dp,
                                const std::function<void(const char*)>& phase = {});

  // Sums the tied head's gradient between the first and the last stage
  // (collective between those two ranks; nothing on the others or without
  // a tied head). Call after backward, before clipping and the step.
  void tiedGradientSum();
  // The tied weight when this rank holds it (first or last stage), else undefined.
  const torch::Tensor& tiedWeight() const { return tied_; }

  bool holdsLoss() const;  // this rank runs the last stage

  // The bubble, measured: from startTiming() on, each step's span on this
  // rank (its first action's start to its last action's end, on the
  // compute stream: CUDA events, or the host clock on a CPU) and the time
  // its actions computed in it (each from the end of its receive). Each
  // step waits for its events at its end while timing (a host sync).
  void startTiming();
  struct Timing {
    int steps = 0;
    double span_ms = 0;      // summed over the steps
    double busy_ms = 0;      // of it, computing
    double forward_ms = 0;   // of busy: the forwards
    double bubble() const { return span_ms > 0 ? 1 - busy_ms / span_ms : 0; }
  };
  // This rank's totals since startTiming(); stops timing.
  Timing takeTiming();
  const PipelineModelOptions& options() const { return options_; }
  const models::LanguageModel& whole() const { return *whole_; }

 private:
  struct Channel;
  struct MicroState;
  struct Marks;
  class LocalUnits;
  // The whole model calls this rank's hooks (unitHooks()) through
  // local_units_, which renumbers its units as shardingUnits() does.
  void hookWhole();
  void registerStage();
  void openChannels();
  Channel& channel(int from, int to, const std::string& kind);
  int stageOf(int chunk) const { return chunk * options_.schedule.pp + options_.rank; }
  // The stage's parameters that train (its blocks', the embedding at
  // stage 0, the final norm and head at the last).
  std::vector<torch::Tensor> stageParameters(int stage);
  // The shapes of a batch's streams: rows / microbatches, positions.
  void startBatch(const torch::Tensor& tokens, int microbatches);
  // F of one micro-batch on `stage` (grad mode: kept for its backward);
  // the stream sent on, or the loss x loss_scale at the last stage.
  torch::Tensor runForward(int stage, int microbatch, const torch::Tensor& tokens, const torch::Tensor& targets,
                           double loss_scale);
  void runBackward(const PipelineAction& action, int stage);
  torch::Tensor receive(int from, const char* kind);
  void sendTo(int to, const char* kind, const torch::Tensor& t);
  void finishSends();
  // While timing: an action's start (after its receive) and its end (before its send).
  void markStart(bool forward);
  void markEnd();
  void collectMarks();

  std::shared_ptr<models::LanguageModel> whole_;
  PipelineModelOptions options_;
  std::map<std::tuple<int, int, std::string>, std::unique_ptr<Channel>> channels_;
  std::shared_ptr<Communicator> tie_comm_;  // first and last stage, with a tied head
  torch::Tensor tied_;
  std::map<std::pair<int, int>, MicroState> in_flight_;  // by (stage, micro-batch)
  torch::Device device_ = torch::kCPU;                   // of the batch's tokens
  int64_t rows_ = 0;                                     // of a micro-batch's streams
  int64_t positions_ = 0;
  std::unique_ptr<LocalUnits> local_units_;
  std::unique_ptr<Marks> marks_;  // while timing
  std::function<void(const char*)> phase_;  // during forwardBackward
  Timing timing_;
};

}  // namespace dtrain
