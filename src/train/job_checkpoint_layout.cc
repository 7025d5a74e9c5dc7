#include "train/job_checkpoint_layout.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "common/error.h"
#include "train/nonfinite_tally.h"
#include "parallel/tensor_buffer.h"

namespace dtrain {
namespace {

const std::string kParamFamily = "model.param";
// Device tensors are filled through a host buffer of this size.
constexpr int64_t kStagingBytes = int64_t{64} << 20;

// The order of a dense parameter's dimensions in memory, outermost first;
// empty when it is row-major. ConfigError for layouts with holes or overlaps.
std::vector<int64_t> storageOrderOf(const torch::Tensor& p, const std::string& name) {
  if (p.is_contiguous()) return {};
  std::vector<int64_t> order(static_cast<size_t>(p.dim()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&p](int64_t a, int64_t b) { return p.stride(a) > p.stride(b); });
  if (!p.permute(order).is_contiguous()) {
    throw ConfigError("parameter '" + name + "' has strides " + toString(p.strides()) +
                      ", which no permutation of its dimensions makes dense; a checkpoint cannot describe it");
  }
  return order;
}

std::string describe(c10::IntArrayRef shape, torch::ScalarType dtype) {
  return toString(shape) + " " + c10::toString(dtype);
}

// Elements [begin, begin + dst.numel()) of `name` into the 1-D `dst`: straight
// into CPU memory, or through a host buffer (pinned for CUDA); the values
// are tallied on the CPU as they pass, so a device sees no extra work.
int64_t readInto(const CheckpointReader& reader, const std::string& name, int64_t begin, const torch::Tensor& dst,
                 NonFiniteTally& tally) {
  const int64_t element = static_cast<int64_t>(dst.element_size());
  if (dst.device().is_cpu() && dst.is_contiguous()) {
    reader.read(name, begin, dst.numel(), dst.data_ptr());
    tally.add(name, dst);
    return dst.numel() * element;
  }
  const int64_t chunk = std::max<int64_t>(1, kStagingBytes / element);
  const torch::Tensor staging = torch::empty(
      {std::min(chunk, dst.numel())}, torch::TensorOptions().dtype(dst.scalar_type()).pinned_memory(dst.is_cuda()));
  for (int64_t at = 0; at < dst.numel(); at += chunk) {
    const int64_t n = std::min(chunk, dst.numel() - at);
    reader.read(name, begin + at, n, staging.data_ptr());
    tally.add(name, staging.narrow(0, 0, n));
    dst.narrow(0, at, n).copy_(staging.narrow(0, 0, n));
  }
  return dst.numel() * element;
}

}  // namespace

torch::ScalarType CheckpointLayout::Family::dtypeOf(int slab) const {
  for (const Held& h : held) {
    if (h.slab == slab) return h.tensor.scalar_type();
  }
  throw ConfigError("checkpoint: this rank holds no '" + name + "' of slab " + std::to_string(slab));
}

CheckpointLayout::CheckpointLayout(DataParallel& dp, Optimizer& optimizer, GradScaler& scaler, ShardStage stage,
                                   int rank, int world, MeshPlacement tp, bool frozen)
    : dp_(dp), optimizer_(optimizer), scaler_(scaler), rank_(rank), world_(world), stage_(stage) {
  if (tp.tp < 1 || tp.replicas < 1 || world % (tp.tp * tp.replicas) != 0) {
    throw ConfigError("checkpoint: tp " + std::to_string(tp.tp) + " x " + std::to_string(tp.replicas) +
                      " replicas does not divide the world of " + std::to_string(world) + " ranks");
  }
  tp_ = tp.tp;
  replica_size_ = world / tp.replicas;
  tp_rank_ = rank % tp_;
  dp_world_ = replica_size_ / tp_;
  dp_rank_ = (rank % replica_size_) / tp_;
  if (dp_.shardsGradients()) pieces_ = dp_.shardLayout().pieces;
  findParameters(tp.splits);
  findFamilies();
  findWholeTensors(frozen);
}

// Each trained parameter's name, slab and place, from slabRuns over whole slabs.
void CheckpointLayout::findParameters(const std::map<std::string, ParameterSplit>* splits) {
  std::unordered_map<const void*, std::string> first;
  std::vector<std::pair<std::string, std::string>> tied;  // (other name, first name)
  for (const auto& item : dp_.module()->named_parameters(/*recurse=*/true)) {
    auto [it, inserted] = first.emplace(item.value().unsafeGetTensorImpl(), item.key());
    if (!inserted) tied.emplace_back(item.key(), it->second);
  }
  const std::vector<torch::Tensor>& params = dp_.parameters();
  params_.resize(params.size());
  std::vector<bool> placed(params.size(), false);
  for (size_t s = 0; s < dp_.slabs().size(); ++s) {
    for (const ParameterRun& run : dp_.slabRuns(static_cast<int>(s), 0, dp_.paddedSlabNumel(s))) {
      const torch::Tensor& p = params[static_cast<size_t>(run.param)];
      const std::string& name = first.at(p.unsafeGetTensorImpl());
      if (run.offset != 0 || run.numel != p.numel() || placed[static_cast<size_t>(run.param)]) {
        throw ConfigError("checkpoint: parameter '" + name + "' does not lie in one piece of one slab");
      }
      placed[static_cast<size_t>(run.param)] = true;
      ParameterSplit split;
      split.whole = p.sizes().vec();
      if (splits != nullptr) {
        auto it = splits->find(name);
        if (it == splits->end()) throw ConfigError("checkpoint: tensor parallelism has no split of '" + name + "'");
        split = it->second;
      }
      params_[static_cast<size_t>(run.param)] = {name, static_cast<int>(s), run.position, run.numel,
                                                 storageOrderOf(p, name), std::move(split)};
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!placed[i] && params[i].numel() > 0) throw ConfigError("checkpoint: a parameter lies in no slab");
  }
  for (const auto& [other, name] : tied) aliases_[kParamFamily + "." + other] = kParamFamily + "." + name;
}

// The parameters' values, then each optimizer state, as this rank holds them.
void CheckpointLayout::findFamilies() {
  Family values{kParamFamily, {}};
  if (dp_.shardsParameters()) {
    for (size_t k = 0; k < pieces_.size(); ++k) {
      const ShardPiece& piece = pieces_[k];
      values.held.push_back({piece.slab, piece.offset + dp_rank_ * (piece.numel / dp_world_), dp_.shards()[k].param});
    }
  } else {
    for (size_t s = 0; s < dp_.slabs().size(); ++s) values.held.push_back({static_cast<int>(s), 0, dp_.slabs()[s].param});
  }
  families_.push_back(std::move(values));
  for (const LocalOptimizerState& state : optimizer_.localState()) {
    const std::string name = "optimizer." + state.name;
    auto it = std::find_if(families_.begin(), families_.end(), [&](const Family& f) { return f.name == name; });
    if (it == families_.end()) it = families_.insert(families_.end(), Family{name, {}});
    it->held.push_back({state.slab, state.begin, state.tensor});
  }
  const std::map<std::string, std::string> param_aliases = aliases_;
  for (const Family& f : families_) {
    if (f.name == kParamFamily) continue;
    for (const auto& [other, name] : param_aliases) {
      aliases_[f.name + other.substr(kParamFamily.size())] = f.name + name.substr(kParamFamily.size());
    }
  }
}

void CheckpointLayout::findWholeTensors(bool frozen) {
  Optimizer& optimizer = optimizer_;
  whole_.push_back({"optimizer." + optimizer.name() + ".step",
                    [&optimizer] { return torch::tensor(optimizer.stepCount(), torch::kLong); },
                    [&optimizer, name = "optimizer." + optimizer.name() + ".step"](const torch::Tensor& t) {
                      const int64_t steps = t.item<int64_t>();
                      // Bias corrections of a negative count divide by a sign-flipped term.
                      if (steps < 0) {
                        throw ConfigError("tensor '" + name + "' is " + std::to_string(steps) +
                                          ", expected a non-negative step count");
                      }
                      optimizer.setStepCount(steps);
                    }});
  for (const auto& [key, value] : scaler_.stateDict()) {
    GradScaler& scaler = scaler_;
    const std::string name = key;
    whole_.push_back({key, [&scaler, name] { return scaler.stateDict().at(name); }, nullptr});  // applied together
  }
  const bool main = rank_ == 0;
  whole_.push_back({"rng.cpu",
                    [] {
                      at::Generator generator = at::detail::getDefaultCPUGenerator();
                      std::lock_guard<std::mutex> lock(generator.mutex());
                      return generator.get_state();
                    },
                    [main](const torch::Tensor& state) {
                      if (!main) return;  // rank 0's generator, as before sharding
                      at::Generator generator = at::detail::getDefaultCPUGenerator();
                      std::lock_guard<std::mutex> lock(generator.mutex());
                      generator.set_state(state);
                    }});
  const auto copyInto = [](torch::Tensor live) {
    return [live](const torch::Tensor& saved) {
      torch::NoGradGuard no_grad;
      live.copy_(saved);
    };
  };
  for (const auto& item : dp_.module()->named_buffers(/*recurse=*/true)) {
    const torch::Tensor buffer = item.value();
    whole_.push_back({"model.buffer." + item.key(), [buffer] { return buffer; }, copyInto(buffer)});
  }
  std::unordered_set<const void*> trained;
  for (const torch::Tensor& p : dp_.parameters()) trained.insert(p.unsafeGetTensorImpl());
  for (const auto& item : dp_.module()->named_parameters(/*recurse=*/true)) {
    const torch::Tensor p = item.value();
    const std::string name = kParamFamily + "." + item.key();
    if (trained.count(p.unsafeGetTensorImpl()) || aliases_.count(name) || (!frozen && !p.requires_grad())) continue;
    whole_.push_back({name, [p] { return p; }, copyInto(p)});
  }
}

std::vector<LogicalTensor> CheckpointLayout::logicalTensors() const {
  std::vector<LogicalTensor> out;
  for (const Family& f : families_) {
    for (const Parameter& p : params_) {
      out.push_back({f.name + "." + p.name, f.dtypeOf(p.slab), p.split.whole, p.storage_order});
    }
  }
  for (const Whole& w : whole_) {
    const torch::Tensor value = w.value();
    out.push_back({w.name, value.scalar_type(), value.sizes().vec(), {}});
  }
  std::sort(out.begin(), out.end(), [](const LogicalTensor& a, const LogicalTensor& b) { return a.name < b.name; });
  return out;
}

std::vector<std::vector<std::pair<int64_t, int64_t>>> CheckpointLayout::ownedBy(int dp_rank) const {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> owned(dp_.slabs().size());
  if (!pieces_.empty()) {
    for (const ShardPiece& piece : pieces_) {
      const int64_t slice = piece.numel / dp_world_;
      owned[static_cast<size_t>(piece.slab)].emplace_back(piece.offset + dp_rank * slice,
                                                          piece.offset + (dp_rank + 1) * slice);
    }
    return owned;
  }
  for (size_t s = 0; s < owned.size(); ++s) {
    const int64_t numel = dp_.paddedSlabNumel(s);
    owned[s].emplace_back(numel * dp_rank / dp_world_, numel * (dp_rank + 1) / dp_world_);
  }
  return owned;
}

std::vector<ShardRange> CheckpointLayout::rangesOf(int rank) const {
  std::vector<ShardRange> ranges;
  for (const Run& run : runsOf(rank)) ranges.push_back(run.range);
  return ranges;
}

std::vector<CheckpointLayout::Run> CheckpointLayout::runsOf(int rank) const {
  if (rank >= replica_size_) return {};  // another replica of replica 0's state
  const auto owned = ownedBy(rank / tp_);
  const int tp_rank = rank % tp_;
  // Parameters in slab order, so each family's runs lie in the file as in memory.
  std::vector<const Parameter*> order;
  for (const Parameter& p : params_) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](const Parameter* a, const Parameter* b) {
    return a->slab != b->slab ? a->slab < b->slab : a->start < b->start;
  });
  std::vector<Run> ranges;
  for (const Family& f : families_) {
    for (const Parameter* p : order) {
      if (!writesPart(p->split, tp_rank, tp_)) continue;
      int64_t from = -1, to = -1;
      for (const auto& [begin, end] : owned[static_cast<size_t>(p->slab)]) {
        const int64_t a = std::max(begin, p->start), b = std::min(end, p->start + p->numel);
        if (a >= b) continue;
        if (from >= 0 && a != to) {
          throw ConfigError("checkpoint: rank " + std::to_string(rank) + " owns two separate runs of '" + p->name + "'");
        }
        if (from < 0) from = a;
        to = b;
      }
      if (from < 0) continue;
      int64_t part = from - p->start;
      for (const auto& [begin, count] : wholeRunsOf(p->split, tp_rank, tp_, part, to - from)) {
        ranges.push_back({{f.name + "." + p->name, begin, count}, &f, p, part});
        part += count;
      }
    }
  }
  if (rank == 0) {
    for (const Whole& w : whole_) {
      const int64_t numel = w.value().numel();
      if (numel > 0) ranges.push_back({{w.name, 0, numel}});
    }
  }
  return ranges;
}

std::vector<TensorToWrite> CheckpointLayout::tensorsToWrite() const {
  std::map<std::string, const Whole*> wholes;
  for (const Whole& w : whole_) wholes[w.name] = &w;
  std::vector<TensorToWrite> out;
  std::map<std::string, size_t> written;  // tensor -> its entry in `out` (several runs: one after the other)
  for (const Run& run : runsOf(rank_)) {
    const ShardRange& r = run.range;
    if (run.param == nullptr) {
      const torch::Tensor value = wholes.at(r.tensor)->value().detach();  // as it is now: one snapshot
      out.push_back({r.tensor, value.scalar_type(), {r.count}, [value] { return value.reshape({-1}); }});
      continue;
    }
    const Family* family = run.family;
    const Parameter* param = run.param;
    const int64_t at = param->start + run.part_begin;
    const auto held = std::find_if(family->held.begin(), family->held.end(), [&](const Held& h) {
      return h.slab == param->slab && h.begin <= at && at + r.count <= h.begin + h.tensor.numel();
    });
    if (held == family->held.end()) {
      throw ConfigError("checkpoint: rank " + std::to_string(rank_) + " holds no '" + r.tensor + "' elements [" +
                        std::to_string(r.begin) + ", " + std::to_string(r.begin + r.count) + ") it should write");
    }
    const torch::Tensor view = held->tensor.detach().narrow(0, at - held->begin, r.count);
    auto [entry, first] = written.emplace(r.tensor, out.size());
    if (first) {
      out.push_back({r.tensor, view.scalar_type(), {r.count}, [view] { return view; }});
      continue;
    }
    TensorToWrite& previous = out[entry->second];
    previous.shape[0] += r.count;
    previous.fetch = [before = previous.fetch, view] { return torch::cat({before(), view}); };
  }
  return out;
}

void CheckpointLayout::checkAgainst(const CheckpointReader& reader) const {
  for (const LogicalTensor& t : logicalTensors()) {
    const CheckpointTensorInfo* info = reader.find(t.name);
    if (info == nullptr) {
      throw ConfigError("checkpoint " + reader.path() + " has no '" + t.name +
                        "' (a different --model, --optimizer or precision?)");
    }
    if (info->shape != t.shape || info->dtype != t.dtype) {
      throw ConfigError("checkpoint " + reader.path() + ": '" + t.name + "' has shape " +
                        describe(info->shape, info->dtype) + ", but this model has " + describe(t.shape, t.dtype) +
                        (t.name == "rng.cpu" ? " (not a CPU generator state of this libtorch)"
                                             : " (a different --model or data set?)"));
    }
  }
}

// Zeros `held` (padding and alignment gaps are zero in a live run too),
// then reads every parameter run that lies in it.
int64_t CheckpointLayout::fill(const CheckpointReader& reader, const Family& family, const Held& held,
                               NonFiniteTally& tally) const {
  held.tensor.zero_();
  const int64_t end = held.begin + held.tensor.numel();
  int64_t bytes = 0;
  for (const Parameter& p : params_) {
    const int64_t a = std::max(held.begin, p.start), b = std::min(end, p.start + p.numel);
    if (p.slab != held.slab || a >= b) continue;
    const std::string name = family.name + "." + p.name;
    const torch::Tensor dst = held.tensor.narrow(0, a - held.begin, b - a);
    if (reader.find(name)->storage_order == p.storage_order) {
      int64_t at = 0;
      for (const auto& [begin, count] : wholeRunsOf(p.split, tp_rank_, tp_, a - p.start, b - a)) {
        bytes += readInto(reader, name, begin, dst.narrow(0, at, count), tally);
        at += count;
      }
      continue;
    }
    // Saved in another memory layout (channels-last or not, a column-split
    // weight's column-major): read whole, take this rank's part, laid out
    // as this parameter lies in memory.
    torch::Tensor whole = reader.readTensor(name);
    if (p.split.kind != ParameterSplit::Kind::kWhole) whole = partOf(whole, p.split, tp_rank_, tp_);
    if (!p.storage_order.empty()) whole = whole.permute(p.storage_order);
    const torch::Tensor run = whole.contiguous().view({-1}).narrow(0, a - p.start, b - a);
    tally.add(name, run);
    dst.copy_(run);
    bytes += whole.numel() * static_cast<int64_t>(whole.element_size());
  }
  return bytes;
}

std::map<std::string, std::vector<int64_t>> CheckpointLayout::parameterShapes() const {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const Parameter& p : params_) shapes[p.name] = p.split.whole;
  return shapes;
}

void CheckpointLayout::loadParameters(const ParameterReader& read) const {
  torch::NoGradGuard no_grad;
  for (const Held& held : families_.at(0).held) {  // kParamFamily's
    held.tensor.zero_();
    const int64_t end = held.begin + held.tensor.numel();
    for (const Parameter& p : params_) {
      const int64_t a = std::max(held.begin, p.start), b = std::min(end, p.start + p.numel);
      if (p.slab != held.slab || a >= b) continue;
      const torch::Tensor dst = held.tensor.narrow(0, a - held.begin, b - a);
      int64_t at = 0;
      for (const auto& [begin, count] : wholeRunsOf(p.split, tp_rank_, tp_, a - p.start, b - a)) {
        read(p.name, p.storage_order, begin, dst.narrow(0, at, count));
        at += count;
      }
    }
  }
  if (dp_.shardsParameters()) dp_.shardLayout().published();
}

int64_t CheckpointLayout::restore(const CheckpointReader& reader, bool allow_nonfinite) const {
  checkAgainst(reader);
  torch::NoGradGuard no_grad;
  NonFiniteTally tally;
  int64_t bytes = 0;
  for (const Family& f : families_) {
    for (const Held& h : f.held) bytes += fill(reader, f, h, tally);
  }
  std::vector<torch::Tensor> saved;
  for (const Whole& w : whole_) {
    saved.push_back(reader.readTensor(w.name));
    tally.add(w.name, saved.back());
    bytes += saved.back().numel() * static_cast<int64_t>(saved.back().element_size());
  }
  tally.check(reader.path(), allow_nonfinite);
  std::map<std::string, torch::Tensor> scaler;
  for (size_t i = 0; i < whole_.size(); ++i) {
    const Whole& w = whole_[i];
    if (!w.apply) {
      scaler[w.name] = saved[i];
      continue;
    }
    // Values libtorch refuses (a generator state it cannot take) come as
    // its error with a stack trace; this names the checkpoint instead.
    try {
      w.apply(saved[i]);
    } catch (const ConfigError& e) {
      throw ConfigError("checkpoint " + reader.path() + ": " + e.message());
    } catch (const c10::Error& e) {
      throw ConfigError("checkpoint " + reader.path() + ": tensor '" + w.name + "' does not load: " +
                        e.what_without_backtrace());
    }
  }
  if (!scaler.empty()) scaler_.loadStateDict(scaler);
  // ZeRO-3: the master shards changed; the compute copies and gathers follow.
  if (dp_.shardsParameters()) dp_.shardLayout().published();
  return bytes;
}

}  // namespace dtrain
