// CheckpointLayout: a training job's state as the logical tensors of a
// sharded checkpoint (include/dtrain/checkpoint.h), for any --shard stage
// and world size. (private to train/)
//
// Per parameter (by its first name in the module; a tied weight's other
// names are aliases): "model.param.<name>" (the master values: the slabs,
// or ZeRO-3's float32 master shards) and "optimizer.<state>.<name>" for
// each of the optimizer's per-slab states (Optimizer::localState(), e.g.
// "optimizer.adamw.exp_avg.<name>"). Whole, written by rank 0:
// "optimizer.<opt>.step", the loss scaler's state, "rng.cpu" (rank 0's
// generator), "model.buffer.<name>", and any parameter DataParallel does
// not train, unless it is a frozen one (requires_grad false) of a layout
// that leaves them out: a LoRA run's base, which the job loads again.
//
// Which ranks write what: every slab (in the layout the optimizers see,
// DataParallel::slabRuns) is cut into per-rank ranges, the same ones the
// optimizer's shards use: ZeRO-2/3 rank r's part of each piece, otherwise
// the r-th 1/N of each slab (ZeRO-1's slices; replicated state split
// evenly so that every rank writes its share in parallel). A rank writes,
// for every parameter, the run of it that falls in its ranges, of every
// family, copying one run at a time to the host. Loading is the same map
// backwards: each rank fills every tensor it holds (whole slabs when they
// are replicated, its slices when sharded) from whichever shards hold the
// runs, so a checkpoint of any world size and stage loads into any other.
//
// Tensor parallelism: the logical tensors stay the whole model's (names and
// shapes); a split parameter's runs map onto the whole's elements
// (wholeRunsOf: a column-split weight is written column-major, so each
// part is one run), so a checkpoint of any tp loads into any other. The
// data-parallel ranges above are cut over the ranks of one tp position;
// a parameter every tp rank holds whole is written by tp rank 0. Under
// hybrid sharding the replicas hold the same state: replica 0 writes it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dtrain/amp.h"
#include "dtrain/checkpoint.h"
#include "dtrain/data_parallel.h"
#include "dtrain/optim.h"
#include "checkpoint/checkpoint_file_writer.h"
#include "checkpoint/checkpoint_sharded.h"
#include "parallel/tensor_parallel_plan.h"
#include "parallel/parallel_plan.h"

namespace dtrain {

class NonFiniteTally;

// Where the ranks' state lies on the mesh: how the parameters are split
// over the tp ranks (tp 1: not at all), and how many replicas of the
// sharded state there are (hybrid sharding: the dp_replicate groups; only
// replica 0, the first world / replicas ranks, writes).
struct MeshPlacement {
  int tp = 1;
  int replicas = 1;
  const std::map<std::string, ParameterSplit>* splits = nullptr;  // by parameter name
};

class CheckpointLayout {
 public:
  // Reads the layout of the live state (no collective). `rank` of
  // `world`; `stage` is the plan's (TrainingJob::plan()), which the
  // checkpoint's metadata names.
  // `world` is replicas x the sharding ranks x tp, tp innermost.
  // `frozen`: whether frozen parameters are in the checkpoint (see above).
  CheckpointLayout(DataParallel& dp, Optimizer& optimizer, GradScaler& scaler, ShardStage stage, int rank, int world,
                   MeshPlacement tp = {}, bool frozen = true);

  // The --shard stage of the job the layout was read from.
  ShardStage stage() const { return stage_; }
  // Every logical tensor (name order) and the aliases of tied weights.
  std::vector<LogicalTensor> logicalTensors() const;
  const std::map<std::string, std::string>& aliases() const { return aliases_; }
  // The ranges rank r (any rank) writes, in the order it writes them.
  std::vector<ShardRange> rangesOf(int rank) const;
  // This rank's ranges with what to write for each (1-D, `count` long).
  std::vector<TensorToWrite> tensorsToWrite() const;

  // Every tensor this rank holds, from `reader` (written at any world size
  // and stage). Checks first that the checkpoint has every logical tensor
  // at this shape and dtype (ConfigError naming the checkpoint, the tensor
  // and both shapes, nothing changed). NaN or Inf in what this rank read
  // is a ConfigError naming the tensor (unless `allow_nonfinite`: a
  // warning), as is a value libtorch refuses (an RNG state); the state is
  // then partly restored. Returns the bytes read.
  int64_t restore(const CheckpointReader& reader, bool allow_nonfinite) const;

  // Elements [begin, begin + dst.numel()) of the whole parameter `name`
  // (its first name), in `storage_order` (empty: row-major), into the
  // 1-D `dst`.
  using ParameterReader = std::function<void(const std::string& name, const std::vector<int64_t>& storage_order,
                                             int64_t begin, const torch::Tensor& dst)>;
  // The whole shape of every trained parameter, by its first name.
  std::map<std::string, std::vector<int64_t>> parameterShapes() const;
  // The trained parameters' values this rank holds (its ZeRO-3 master
  // slices, its tp parts, or whole slabs), each run of them from `read`,
  // as restore() reads them: only what this rank holds is asked for.
  // Nothing else changes (optimizer state, step, buffers); under ZeRO-3
  // the compute copies follow.
  void loadParameters(const ParameterReader& read) const;

 private:
  // A parameter's place in the slabs and what its logical tensors are.
  struct Parameter {
    std::string name;
    int slab = 0;
    int64_t start = 0;  // of its first element in the slab
    int64_t numel = 0;
    std::vector<int64_t> storage_order;  // empty: row-major
    ParameterSplit split;                // its place in the whole parameter (split.whole: the logical shape)
  };
  // A live 1-D tensor this rank holds over elements [begin, ...) of a slab.
  struct Held {
    int slab = 0;
    int64_t begin = 0;
    torch::Tensor tensor;
  };
  // "model.param" or "optimizer.<state>": a logical tensor per parameter.
  struct Family {
    std::string name;
    std::vector<Held> held;
    torch::ScalarType dtypeOf(int slab) const;
  };
  // A whole tensor: its current value, and how a loaded value is applied.
  struct Whole {
    std::string name;
    std::function<torch::Tensor()> value;
    std::function<void(const torch::Tensor&)> apply;
  };

  void findParameters(const std::map<std::string, ParameterSplit>* splits);
  void findFamilies();
  void findWholeTensors(bool frozen);
  // The elements of each slab data-parallel rank r writes.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ownedBy(int dp_rank) const;
  // A range rank r writes and where its first element lies in the
  // parameter's part (for whole tensors: -1).
  struct Run {
    ShardRange range;
    const Family* family = nullptr;
    const Parameter* param = nullptr;
    int64_t part_begin = -1;
  };
  std::vector<Run> runsOf(int rank) const;
  void checkAgainst(const CheckpointReader& reader) const;
  int64_t fill(const CheckpointReader& reader, const Family& family, const Held& held, NonFiniteTally& tally) const;

  DataParallel& dp_;
  Optimizer& optimizer_;
  GradScaler& scaler_;
  int rank_, world_;
  int tp_ = 1, tp_rank_ = 0, dp_rank_ = 0, dp_world_ = 1, replica_size_ = 1;
  ShardStage stage_;
  std::vector<Parameter> params_;  // DataParallel's order
  std::map<std::string, std::string> aliases_;
  std::vector<Family> families_;
  std::vector<Whole> whole_;
  std::vector<ShardPiece> pieces_;  // ZeRO-2/3
};

}  // namespace dtrain
