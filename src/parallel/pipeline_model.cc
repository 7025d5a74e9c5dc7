#include "parallel/pipeline_model.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "common/error.h"
#include "parallel/tensor_buffer.h"

#if DTRAIN_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace dtrain {

// One direction of one kind of traffic between two pipeline ranks.
struct PipelineModel::Channel {
  std::shared_ptr<Communicator> comm;
  int peer = 0;  // the other end's rank in comm
  std::vector<std::pair<std::shared_ptr<Work>, torch::Tensor>> sends;  // until the step's end
#if DTRAIN_TORCH_CUDA
  std::optional<c10::cuda::CUDAStream> side;  // the channel's transfers, beside the compute stream

  c10::cuda::CUDAStream sideAfterCompute(const torch::Tensor& t) {
    const c10::DeviceIndex device = t.device().index();
    if (!side) side = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device);
    at::cuda::CUDAEvent ready;
    ready.record(c10::cuda::getCurrentCUDAStream(device));
    ready.block(*side);
    t.record_stream(side->unwrap());
    return *side;
  }
#endif

  void send(const torch::Tensor& t, std::chrono::milliseconds timeout) {
    SendRecvOptions options;
    options.timeout = timeout;
    void* stream = nullptr;
#if DTRAIN_TORCH_CUDA
    if (t.is_cuda()) stream = sideAfterCompute(t).stream();  // the compute stream does not wait for it
#endif
    sends.emplace_back(comm->send(bufferOf(t, stream), peer, options), t);
  }

  torch::Tensor recv(torch::IntArrayRef sizes, const torch::TensorOptions& tensor_options,
                     std::chrono::milliseconds timeout) {
    torch::Tensor out = torch::empty(sizes, tensor_options);
    SendRecvOptions options;
    options.timeout = timeout;
#if DTRAIN_TORCH_CUDA
    if (out.is_cuda()) {
      c10::cuda::CUDAStream s = sideAfterCompute(out);
      comm->recv(bufferOf(out, s.stream()), peer, options);  // s waits for it
      at::cuda::CUDAEvent done;
      done.record(s);
      done.block(c10::cuda::getCurrentCUDAStream(out.device().index()));
      return out;
    }
#endif
    comm->recv(bufferOf(out, nullptr), peer, options)->wait(timeout);
    return out;
  }

  // Every send of the step done (CPU), or ordered before the compute
  // stream's next work (CUDA; their memory is kept by record_stream).
  void finish(std::chrono::milliseconds timeout) {
    for (auto& [work, tensor] : sends) {
      if (!tensor.is_cuda()) work->wait(timeout);
    }
#if DTRAIN_TORCH_CUDA
    if (side && !sends.empty()) {
      at::cuda::CUDAEvent done;
      done.record(*side);
      done.block(c10::cuda::getCurrentCUDAStream(side->device_index()));
    }
#endif
    sends.clear();
  }
};

// Time marks of one step on the compute stream (CUDA events) or the host
// clock: the step's start and end, and each action's start and end.
struct PipelineModel::Marks {
#if DTRAIN_TORCH_CUDA
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events;
#endif
  std::vector<std::chrono::steady_clock::time_point> host;
  std::vector<bool> forward;  // per action pair: a forward
  bool cuda = false;

  void mark(torch::Device device) {
    cuda = device.is_cuda();
#if DTRAIN_TORCH_CUDA
    if (cuda) {
      events.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
      events.back()->record(c10::cuda::getCurrentCUDAStream(device.index()));
      return;
    }
#endif
    host.push_back(std::chrono::steady_clock::now());
  }
  size_t size() const {
#if DTRAIN_TORCH_CUDA
    if (cuda) return events.size();
#endif
    return host.size();
  }
  double between(size_t a, size_t b) const {  // ms from mark a to mark b
#if DTRAIN_TORCH_CUDA
    if (cuda) {
      events[b]->synchronize();
      return events[a]->elapsed_time(*events[b]);
    }
#endif
    return std::chrono::duration<double, std::milli>(host[b] - host[a]).count();
  }
  void clear() {
#if DTRAIN_TORCH_CUDA
    events.clear();
#endif
    host.clear();
    forward.clear();
  }
};

// What a micro-batch's forward on one stage left for its backward.
struct PipelineModel::MicroState {
  torch::Tensor input;   // the received stream (a leaf); undefined at stage 0
  torch::Tensor output;  // the stream sent on, or the loss at the last stage
  torch::Tensor grad;    // the gradient of output, received (kept from I to W)
};

// The whole model's unit numbers (0 the root, b + 1 block b) to this
// rank's (shardingUnits()), passed on to the hooks DataParallel set.
class PipelineModel::LocalUnits : public models::UnitHooks {
 public:
  models::UnitHooks* hooks = nullptr;
  std::map<int, int> local;

  int of(int unit) const {
    auto it = local.find(unit);
    if (it == local.end()) {
      throw ConfigError("pipeline: the model's unit " + std::to_string(unit) + " is not on this rank's stages");
    }
    return it->second;
  }
  void beforeForward(int unit) override { hooks->beforeForward(of(unit)); }
  std::vector<torch::Tensor> afterForward(int unit, std::vector<torch::Tensor> outputs) override {
    return hooks->afterForward(of(unit), std::move(outputs));
  }
};

namespace {

constexpr const char* kActivations = "activations";
constexpr const char* kGradients = "gradients";

void checkOptions(const models::LanguageModel& whole, const PipelineModelOptions& o) {
  const PipelineSchedule& s = o.schedule;
  if (s.pp < 2 || o.rank < 0 || o.rank >= s.pp || static_cast<int>(s.ranks.size()) != s.pp ||
      static_cast<int>(o.stages.size()) != s.stages()) {
    throw ConfigError("pipeline: rank " + std::to_string(o.rank) + " of a schedule of pp " + std::to_string(s.pp) +
                      " with " + std::to_string(o.stages.size()) + " stages; expected pp >= 2, a rank below it " +
                      "and pp x virtual stages = " + std::to_string(s.stages()) + " stages");
  }
  int next = 0;
  for (const StageBlocks& stage : o.stages) {
    if (stage.first != next || stage.end <= stage.first) next = -1;
    if (next < 0) break;
    next = stage.end;
  }
  const int blocks = static_cast<int>(whole.blocks().size());
  if (next != blocks) {
    throw ConfigError("pipeline: stages " + formatPipelineStages(o.stages) + " do not cover the model's " +
                      std::to_string(blocks) + " blocks in order");
  }
  if (!o.channel || !o.group) throw ConfigError("pipeline: no channels or group to reach the other stages");
}

// The last action of a rank that computes weight gradients (a B, a W, or
// the last stage's I, which does its whole backward): its backwards before
// it are not reduced over the data-parallel ranks.
size_t lastWeightBackward(const std::vector<PipelineAction>& actions, int last_stage_chunk) {
  size_t last = actions.size();
  for (size_t i = 0; i < actions.size(); ++i) {
    using Op = PipelineAction::Op;
    const PipelineAction& a = actions[i];
    const bool on_last_stage = a.chunk == last_stage_chunk;
    if (a.op == Op::kBackward || (a.op == Op::kBackwardWeight && !on_last_stage) ||
        (a.op == Op::kBackwardInput && on_last_stage)) {
      last = i;
    }
  }
  return last;
}

}  // namespace

PipelineModel::PipelineModel(std::shared_ptr<models::LanguageModel> whole, PipelineModelOptions options)
    : whole_(std::move(whole)), options_(std::move(options)) {
  checkOptions(*whole_, options_);
  forward_flops_ = whole_->trainingFlopsPerSample() / 3;  // the whole model's, as MFU counts a sample
  registerStage();
  openChannels();
  local_units_ = std::make_unique<LocalUnits>();
  local_units_->local[0] = 0;
  int next = 1;
  for (int chunk = 0; chunk < options_.schedule.virtual_stages; ++chunk) {
    const StageBlocks& blocks = options_.stages[stageOf(chunk)];
    for (int b = blocks.first; b < blocks.end; ++b) local_units_->local[b + 1] = next++;
  }
}

PipelineModel::~PipelineModel() {
  if (whole_->unitHooks() == local_units_.get()) whole_->setUnitHooks(nullptr);
}

std::vector<std::vector<torch::Tensor>> PipelineModel::shardingUnits() {
  std::vector<std::vector<torch::Tensor>> units(1);
  std::set<const void*> seen;
  const auto add = [&seen](std::vector<torch::Tensor>& unit, const torch::Tensor& p) {
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) unit.push_back(p);
  };
  if (options_.rank == 0) {
    for (const torch::Tensor& p : whole_->embeddingParameters()) add(units[0], p);
  }
  if (holdsLoss()) {
    for (const torch::Tensor& p : whole_->headParameters()) add(units[0], p);
  }
  for (int chunk = 0; chunk < options_.schedule.virtual_stages; ++chunk) {
    const StageBlocks& blocks = options_.stages[stageOf(chunk)];
    for (int b = blocks.first; b < blocks.end; ++b) {
      units.emplace_back();
      for (const torch::Tensor& p : whole_->blocks()[b]->parameters()) add(units.back(), p);
    }
  }
  return units;
}

void PipelineModel::hookWhole() {
  local_units_->hooks = unitHooks();
  whole_->setUnitHooks(unitHooks() != nullptr ? local_units_.get() : nullptr);
}

bool PipelineModel::holdsLoss() const { return (options_.schedule.stages() - 1) % options_.schedule.pp == options_.rank; }

std::vector<torch::Tensor> PipelineModel::stageParameters(int stage) {
  std::vector<torch::Tensor> out;
  const StageBlocks& blocks = options_.stages.at(stage);
  if (stage == 0) {
    for (const torch::Tensor& p : whole_->embeddingParameters()) out.push_back(p);
  }
  for (int b = blocks.first; b < blocks.end; ++b) {
    for (const torch::Tensor& p : whole_->blocks()[b]->parameters()) out.push_back(p);
  }
  if (stage == options_.schedule.stages() - 1) {
    for (const torch::Tensor& p : whole_->headParameters()) out.push_back(p);
    out.push_back(whole_->outputWeight());
  }
  std::vector<torch::Tensor> trained;
  std::set<const void*> seen;
  for (const torch::Tensor& p : out) {
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) trained.push_back(p);
  }
  return trained;
}

// The stage's parameters under the whole model's names (holder modules
// mirror the path); the rest of the whole model released.
void PipelineModel::registerStage() {
  std::set<const void*> mine;
  for (int chunk = 0; chunk < options_.schedule.virtual_stages; ++chunk) {
    for (const torch::Tensor& p : stageParameters(stageOf(chunk))) mine.insert(p.unsafeGetTensorImpl());
  }
  std::map<std::string, std::shared_ptr<torch::nn::Module>> holders;
  torch::NoGradGuard no_grad;
  for (auto& item : whole_->named_parameters(/*recurse=*/true)) {
    torch::Tensor& p = item.value();
    if (!mine.count(p.unsafeGetTensorImpl())) {
      p.set_data(torch::empty({0}, p.options()));
      continue;
    }
    const std::string& name = item.key();
    torch::nn::Module* holder = this;
    size_t begin = 0;
    for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', begin)) {
      const std::string path = name.substr(0, dot);
      auto& child = holders[path];
      if (!child) child = holder->register_module(name.substr(begin, dot - begin), std::make_shared<torch::nn::Module>());
      holder = child.get();
      begin = dot + 1;
    }
    holder->register_parameter(name.substr(begin), p, p.requires_grad());
  }
  const bool ends = options_.rank == 0 || holdsLoss();
  if (whole_->config().tie_embeddings && ends) tied_ = whole_->outputWeight();
}

void PipelineModel::openChannels() {
  const int pp = options_.schedule.pp, stages = options_.schedule.stages();
  std::vector<std::tuple<int, int, std::string>> edges;  // every rank lists them in this order
  for (const char* kind : {kActivations, kGradients}) {
    for (int s = 0; s + 1 < stages; ++s) {
      const int a = s % pp, b = (s + 1) % pp;
      const auto edge = kind == kActivations ? std::make_tuple(a, b, std::string(kind))
                                             : std::make_tuple(b, a, std::string(kind));
      if (std::find(edges.begin(), edges.end(), edge) == edges.end()) edges.push_back(edge);
    }
  }
  for (const auto& [from, to, kind] : edges) {
    if (from != options_.rank && to != options_.rank) continue;
    auto c = std::make_unique<Channel>();
    c->comm = options_.channel(from, to, kind);
    c->peer = from == options_.rank ? 1 : 0;
    channels_[{from, to, kind}] = std::move(c);
  }
  if (whole_->config().tie_embeddings && (options_.rank == 0 || options_.rank == pp - 1)) {
    tie_comm_ = options_.channel(0, pp - 1, "tied");
  }
}

PipelineModel::Channel& PipelineModel::channel(int from, int to, const std::string& kind) {
  auto it = channels_.find({from, to, kind});
  if (it == channels_.end()) {
    throw ConfigError("pipeline: no " + kind + " channel from rank " + std::to_string(from) + " to " +
                      std::to_string(to));
  }
  return *it->second;
}

torch::Tensor PipelineModel::forward(torch::Tensor) {
  throw ConfigError("pipeline: no rank holds the whole model to compute its logits; train or evaluate the loss, or "
                    "consolidate a checkpoint and generate from it");
}

std::vector<torch::Tensor> PipelineModel::noWeightDecayParameters() {
  std::set<const void*> mine;
  for (const torch::Tensor& p : parameters()) mine.insert(p.unsafeGetTensorImpl());
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : whole_->noWeightDecayParameters()) {
    if (mine.count(p.unsafeGetTensorImpl())) out.push_back(p);
  }
  return out;
}

torch::Tensor PipelineModel::receive(int from, const char* kind) {
  if (phase_) phase_("pipeline wait");
  const std::vector<int64_t> sizes = {rows_, positions_, whole_->config().dim};
  return channel(from, options_.rank, kind)
      .recv(sizes, torch::TensorOptions().dtype(torch::kFloat).device(device_), options_.timeout);
}

void PipelineModel::sendTo(int to, const char* kind, const torch::Tensor& t) {
  const std::vector<int64_t> sizes = {rows_, positions_, whole_->config().dim};
  if (!t.sizes().equals(sizes) || t.scalar_type() != torch::kFloat) {
    throw ConfigError("pipeline: a " + std::string(kind) + " transfer of " + toString(t.sizes()) + " " +
                      std::string(c10::toString(t.scalar_type())) + "; expected float32 " + toString(sizes));
  }
  channel(options_.rank, to, kind).send(t.contiguous(), options_.timeout);
}

void PipelineModel::finishSends() {
  for (auto& [key, c] : channels_) c->finish(options_.timeout);
}

torch::Tensor PipelineModel::runForward(int stage, int microbatch, const torch::Tensor& tokens,
                                        const torch::Tensor& targets, double loss_scale) {
  const int pp = options_.schedule.pp, stages = options_.schedule.stages();
  MicroState state;
  models::ResidualStream in;
  AutocastGuard autocast(device_, options_.precision);
  if (models::UnitHooks* hooks = unitHooks()) hooks->beforeForward(0);
  if (stage == 0) {
    markStart(true);
    in = whole_->embedStream(tokens);
  } else {
    state.input = receive((stage - 1) % pp, kActivations);
    markStart(true);
    if (torch::GradMode::is_enabled()) state.input.requires_grad_(true);
    in = {state.input, {}};
  }
  const StageBlocks& blocks = options_.stages[stage];
  const models::ResidualStream out = whole_->forwardBlocks(in, blocks.first, blocks.end);
  if (stage == stages - 1) {
    state.output = whole_->lossOf(out, targets) * loss_scale;
  } else {
    state.output = out.value().to(torch::kFloat).contiguous();
  }
  markEnd();
  if (stage != stages - 1) sendTo((stage + 1) % pp, kActivations, state.output);
  torch::Tensor result = state.output;
  if (torch::GradMode::is_enabled()) in_flight_[{stage, microbatch}] = std::move(state);
  return result;
}

void PipelineModel::runBackward(const PipelineAction& action, int stage) {
  const int pp = options_.schedule.pp, stages = options_.schedule.stages();
  const bool last = stage == stages - 1;
  using Op = PipelineAction::Op;
  // The last stage's I is its whole backward and its W nothing: the fused
  // classifier + cross-entropy computes the head's gradients in its forward
  // and hands them out once (a second walk through it is refused).
  if (last && action.op == Op::kBackwardWeight) return;
  auto it = in_flight_.find({stage, action.microbatch});
  if (it == in_flight_.end()) {
    throw ConfigError("pipeline: " + actionText(action, options_.schedule.virtual_stages) + " on rank " +
                      std::to_string(options_.rank) + " before its forward");
  }
  MicroState& state = it->second;
  if (!last && !state.grad.defined()) state.grad = receive((stage + 1) % pp, kGradients);
  markStart(false);
  std::vector<torch::Tensor> grads;
  if (!last) grads.push_back(state.grad);
  if (action.op == Op::kBackwardInput && !last) {
    torch::Tensor g;  // stage 0: nothing waits for the tokens' gradient, W does it all
    if (stage > 0) g = torch::autograd::grad({state.output}, {state.input}, grads, /*retain_graph=*/true)[0].to(torch::kFloat);
    markEnd();
    if (stage > 0) sendTo((stage - 1) % pp, kGradients, g);
    return;
  }
  if (action.op == Op::kBackwardWeight) {  // a stage before the last
    torch::autograd::backward({state.output}, grads, /*retain_graph=*/false, /*create_graph=*/false,
                              stageParameters(stage));
    markEnd();
  } else {
    torch::autograd::backward({state.output}, grads);
    torch::Tensor g = stage > 0 ? state.input.grad().to(torch::kFloat) : torch::Tensor();
    markEnd();
    if (stage > 0) sendTo((stage - 1) % pp, kGradients, g);
  }
  in_flight_.erase(it);
}

void PipelineModel::startBatch(const torch::Tensor& tokens, int microbatches) {
  if (tokens.dim() != 2 || tokens.size(0) % microbatches != 0) {
    throw ConfigError("pipeline: a batch of " + toString(tokens.sizes()) + " tokens does not split into " +
                      std::to_string(microbatches) + " equal micro-batches (--microbatches); expected a " +
                      "--batch-size that is a multiple of it");
  }
  if (tokens.size(1) % options_.sequence_divisor != 0) {
    throw ConfigError("pipeline: " + std::to_string(tokens.size(1)) + " positions do not split into " +
                      std::to_string(options_.sequence_divisor) + " sequence parts");
  }
  device_ = tokens.device();
  rows_ = tokens.size(0) / microbatches;
  positions_ = tokens.size(1) / options_.sequence_divisor;
}

torch::Tensor PipelineModel::forwardBackward(const torch::Tensor& tokens, const torch::Tensor& targets,
                                             DataParallel* dp, const std::function<void(const char*)>& phase) {
  phase_ = phase;
  hookWhole();
  struct Forget {
    std::function<void(const char*)>& phase;
    ~Forget() { phase = nullptr; }
  } forget{phase_};
  const PipelineSchedule& schedule = options_.schedule;
  const int microbatches = schedule.microbatches;
  startBatch(tokens, microbatches);
  const std::vector<torch::Tensor> token_parts = tokens.chunk(microbatches);
  const std::vector<torch::Tensor> target_parts = targets.chunk(microbatches);
  const std::vector<PipelineAction>& actions = schedule.ranks.at(options_.rank);
  const size_t last_sync = lastWeightBackward(actions, holdsLoss() ? schedule.virtual_stages - 1 : -1);
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device_));
  const int stages = schedule.stages();
  if (marks_) marks_->mark(device_);
  for (size_t i = 0; i < actions.size(); ++i) {
    const PipelineAction& a = actions[i];
    const int stage = stageOf(a.chunk);
    if (a.op == PipelineAction::Op::kForward) {
      torch::Tensor out = runForward(stage, a.microbatch, token_parts[a.microbatch], target_parts[a.microbatch],
                                     1.0 / microbatches);
      if (stage == stages - 1) loss_sum += out.detach().to(torch::kFloat);
    } else if (dp != nullptr && i != last_sync) {
      auto no_sync = dp->noSync();
      runBackward(a, stage);
    } else {
      runBackward(a, stage);
    }
  }
  if (phase_) phase_("pipeline wait");
  in_flight_.clear();
  finishSends();
  tiedGradientSum();
  if (marks_) collectMarks();
  return loss_sum;
}

torch::Tensor PipelineModel::loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  hookWhole();
  startBatch(tokens, 1);
  torch::Tensor loss = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device_));
  {
    torch::NoGradGuard no_grad;  // evaluation: the stages keep nothing for a backward
    for (int chunk = 0; chunk < options_.schedule.virtual_stages; ++chunk) {
      const int stage = stageOf(chunk);
      torch::Tensor out = runForward(stage, 0, tokens, targets, 1.0);
      if (stage == options_.schedule.stages() - 1) loss.copy_(out.to(torch::kFloat));
    }
    finishSends();
    BroadcastOptions options;
    options.root = options_.schedule.pp - 1;
    options.timeout = options_.timeout;
    void* stream = currentStreamOf(loss);
    auto work = options_.group->broadcast(bufferOf(loss, stream), options);
    if (!loss.is_cuda()) work->wait(options_.timeout);
  }
  return loss;
}

void PipelineModel::tiedGradientSum() {
  if (!tie_comm_) return;
  torch::Tensor g = tied_.grad();
  if (!g.defined()) {
    throw ConfigError("pipeline: the tied head's weight has no gradient to sum (sharded gradients hold none; "
                      "use --shard optimizer or none with a tied head, or --tie-embeddings off)");
  }
  AllreduceOptions options;
  options.timeout = options_.timeout;
  auto work = tie_comm_->allreduce(bufferOf(g, currentStreamOf(g)), bufferOf(g, currentStreamOf(g)), options);
  if (!g.is_cuda()) work->wait(options_.timeout);
}

void PipelineModel::train(bool on) {
  torch::nn::Module::train(on);
  whole_->train(on);
}

void PipelineModel::markStart(bool forward) {
  if (phase_) phase_(forward ? "forward" : "backward");
  if (!marks_ || !torch::GradMode::is_enabled()) return;
  marks_->forward.push_back(forward);
  marks_->mark(device_);
}

void PipelineModel::markEnd() {
  if (!marks_ || !torch::GradMode::is_enabled()) return;
  marks_->mark(device_);
}

// Marks: the step's start, each action's start and end, the step's end.
void PipelineModel::collectMarks() {
  Marks& m = *marks_;
  m.mark(device_);
  const size_t actions = m.forward.size();
  double busy = 0, forward = 0;
  for (size_t k = 0; k < actions; ++k) {
    const double ms = m.between(1 + 2 * k, 2 + 2 * k);
    busy += ms;
    if (m.forward[k]) forward += ms;
  }
  // The span is the step's, from its start to its sends' end: a rank that
  // waits for its first input or for the last backward counts that wait.
  if (actions > 0) timing_.span_ms += m.between(0, m.size() - 1);
  timing_.busy_ms += busy;
  timing_.forward_ms += forward;
  ++timing_.steps;
  m.clear();
}

void PipelineModel::startTiming() {
  marks_ = std::make_unique<Marks>();
  timing_ = {};
}

PipelineModel::Timing PipelineModel::takeTiming() {
  marks_.reset();
  return timing_;
}

}  // namespace dtrain
