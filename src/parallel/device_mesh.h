// DeviceMesh: the world's ranks as a grid of named dimensions, and one
// communicator per group of ranks along a dimension (or along several,
// flattened): the sub-groups that data, tensor and pipeline parallelism talk
// over (PyTorch's DeviceMesh, JAX's Mesh). Torch-free.
//
// Layout: a shape is an ordered list of named dimensions, outermost first.
// Ranks are laid out row-major, the last dimension innermost: consecutive
// ranks share every coordinate but the last, so with "tp" last the ranks of
// one tensor-parallel group are the GPUs of one node. 8 ranks as
// (dp_replicate=2, dp_shard=2, tp=2):
//
//   rank | dp_replicate dp_shard tp | tp group | dp_shard group | dp_replicate group | dp_replicate+dp_shard
//   -----+--------------------------+----------+----------------+--------------------+----------------------
//     0  |      0          0     0  |  {0, 1}  |     {0, 2}     |       {0, 4}       |     {0, 2, 4, 6}
//     1  |      0          0     1  |  {0, 1}  |     {1, 3}     |       {1, 5}       |     {1, 3, 5, 7}
//     2  |      0          1     0  |  {2, 3}  |     {0, 2}     |       {2, 6}       |     {0, 2, 4, 6}
//     3  |      0          1     1  |  {2, 3}  |     {1, 3}     |       {3, 7}       |     {1, 3, 5, 7}
//     4  |      1          0     0  |  {4, 5}  |     {4, 6}     |       {0, 4}       |     {0, 2, 4, 6}
//     5  |      1          0     1  |  {4, 5}  |     {5, 7}     |       {1, 5}       |     {1, 3, 5, 7}
//     6  |      1          1     0  |  {6, 7}  |     {4, 6}     |       {2, 6}       |     {0, 2, 4, 6}
//     7  |      1          1     1  |  {6, 7}  |     {5, 7}     |       {3, 7}       |     {1, 3, 5, 7}
//
// A group along dimensions D holds the ranks that differ from this one only
// in D's coordinates, in increasing world rank; a rank's place in it (its
// communicator's rank()) is its row-major coordinate over D, in mesh order.
//
// Contract:
// - Owns one communicator per group this rank belongs to; the world's
//   communicator, when given, is shared, not owned.
// - Store keys: a group's communicator bootstraps under
//   "<options.store_prefix>/group/<dims>/<index>" in the job's store: <dims>
//   the group's dimensions of size > 1 joined by '+'
//   ("dp_replicate+dp_shard"), <index> the group's row-major index over the
//   other dimensions' coordinates. Every rank of a group derives the same
//   prefix; no two groups share one. A group of this rank alone is a
//   communicator of size 1 under "<options.store_prefix>/rank/<rank>" (the
//   backends have no store-free path; its keys are this rank's alone). Two
//   meshes over one store need different store_prefix values.
// - Groups with the same ranks are one communicator: dimensions of size 1
//   add no ranks, so {"dp_replicate", "dp_shard"} with dp_replicate = 1 is
//   the dp_shard group. A group of the whole world is
//   options.world_communicator when given, else a new one.
// - Ordering (collective): the constructor creates the groups of every
//   dimension, in dimension order, then options.flattened in their order;
//   every rank of the world must construct its mesh with the same shape and
//   options, at the same point of the job. flatten() of a group not yet
//   created is collective the same way: every rank calls it with the same
//   dimensions in the same order relative to its other flatten() calls.
//   A mesh's accessors are safe from several threads; flatten() calls from
//   several threads of one rank are serialized, not ordered.
// - Errors: ConfigError (one line, naming the mesh's shape) for a shape
//   whose sizes' product is not the world size, a size below 1, an empty,
//   repeated or unusable name (only letters, digits, '_' and '-'), a rank
//   outside the world, an unknown dimension, dimensions named twice or out of
//   mesh order, or a world communicator of another size or rank.
//   Communicator creation's own errors (ConfigError, TimeoutError,
//   CommError) pass through.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace dtrain {

struct World;

struct MeshDimension {
  std::string name;
  int size = 1;
};
// Outermost first.
using MeshShape = std::vector<MeshDimension>;

// "(dp_replicate=2, dp_shard=2, tp=2)".
std::string describeMeshShape(const MeshShape& shape);

// The rank arithmetic of a mesh, without communicators: a checked shape and
// the row-major map between world ranks and coordinates.
class MeshLayout {
 public:
  // ConfigError when the shape is malformed or its product is not world_size.
  MeshLayout(MeshShape shape, int world_size);

  const MeshShape& shape() const { return shape_; }
  int worldSize() const { return world_size_; }
  // The dimension's position in the shape; ConfigError naming the mesh's
  // dimensions when it has none of that name.
  int dimensionIndex(const std::string& name) const;
  int size(const std::string& name) const;

  std::vector<int> coordinatesOf(int rank) const;
  int rankOf(const std::vector<int>& coordinates) const;

  // The group of `rank` along `dims` (one or more, in mesh order): its world
  // ranks ascending, its index among the groups over those dimensions, and
  // the place of `rank` in it.
  std::vector<int> groupRanks(int rank, const std::vector<std::string>& dims) const;
  int groupIndex(int rank, const std::vector<std::string>& dims) const;
  int groupRank(int rank, const std::vector<std::string>& dims) const;

  // The positions of `dims`, checked: non-empty, known, each once, in mesh order.
  std::vector<int> dimensionIndices(const std::vector<std::string>& dims) const;

 private:
  void checkRank(int rank) const;

  MeshShape shape_;
  std::vector<int> strides_;  // world-rank step of one coordinate, per dimension
  int world_size_ = 1;
};

struct DeviceMeshOptions {
  std::string backend = "gloo";  // "gloo" or "nccl"
  std::string store_prefix = "mesh";
  // The groups' init timeout, CUDA device and progress interval; its
  // store_prefix is replaced by each group's own.
  CommunicatorOptions communicator;
  // The job's communicator over every rank, reused for a group of the world.
  std::shared_ptr<Communicator> world_communicator;
  // Groups over several dimensions, created after the dimensions' groups.
  std::vector<std::vector<std::string>> flattened;
};

class DeviceMesh {
 public:
  // Collective: creates this rank's groups (see the contract above).
  DeviceMesh(MeshShape shape, std::shared_ptr<Store> store, int rank, int world_size,
             DeviceMeshOptions options = {});
  // Over a worker's World: its store, rank and size.
  DeviceMesh(MeshShape shape, const World& world, DeviceMeshOptions options = {});

  const MeshLayout& layout() const { return layout_; }
  const MeshShape& shape() const { return layout_.shape(); }
  int rank() const { return rank_; }
  int worldSize() const { return layout_.worldSize(); }

  int size(const std::string& dim) const { return layout_.size(dim); }
  int coordinate(const std::string& dim) const;
  std::vector<int> coordinates() const { return layout_.coordinatesOf(rank_); }

  // A braced list of names ({"dp_replicate", "dp_shard"}) takes the
  // initializer_list overloads; two literals would otherwise also make a
  // std::string from an iterator pair.
  std::vector<int> groupRanks(const std::string& dim) const { return groupRanks(std::vector<std::string>{dim}); }
  std::vector<int> groupRanks(const std::vector<std::string>& dims) const;
  std::vector<int> groupRanks(std::initializer_list<std::string> dims) const {
    return groupRanks(std::vector<std::string>(dims));
  }

  // The group's communicator, created by the constructor or by flatten();
  // ConfigError for a group over several dimensions not created yet.
  std::shared_ptr<Communicator> communicator(const std::string& dim) const;
  std::shared_ptr<Communicator> communicator(const std::vector<std::string>& dims) const;
  std::shared_ptr<Communicator> communicator(std::initializer_list<std::string> dims) const {
    return communicator(std::vector<std::string>(dims));
  }
  // The group over `dims` flattened into one (torch's
  // mesh["dp_replicate", "dp_shard"]._flatten()): collective when not yet created.
  std::shared_ptr<Communicator> flatten(const std::vector<std::string>& dims);

  // A group of two of this rank's group along `dim`: the ranks at
  // coordinates `first` and `second` of it (group ranks 0 and 1), one per
  // `name` (a pipeline keeps its activations and their gradients apart).
  // Collective between the two; every pair this rank is in must be made
  // in the same order on both of its ranks. ConfigError unless this rank
  // is one of them and they differ.
  std::shared_ptr<Communicator> pair(const std::string& dim, int first, int second, const std::string& name);

 private:
  // The dimensions of `dims` that add ranks (size > 1), joined by '+'; ""
  // for a group of this rank alone.
  std::string groupKey(const std::vector<std::string>& dims) const;
  std::shared_ptr<Communicator> createGroup(const std::vector<std::string>& dims, const std::string& key);

  MeshLayout layout_;
  int rank_ = 0;
  std::shared_ptr<Store> store_;
  DeviceMeshOptions options_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Communicator>> groups_;  // by groupKey, guarded by mutex_
};

}  // namespace dtrain
