#include "parallel/device_mesh.h"

#include <limits>
#include <set>
#include <utility>

#include "comm/world.h"
#include "common/error.h"

namespace dtrain {
namespace {

bool usableName(const std::string& name) {
  for (char c : name) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !digit && c != '_' && c != '-') return false;
  }
  return true;
}

std::string joined(const std::vector<std::string>& names, const std::string& separator) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : separator) + name;
  return text;
}

std::string listed(const std::vector<std::string>& names) { return "{" + joined(names, ", ") + "}"; }

void checkNames(const MeshShape& shape) {
  const std::string mesh = "device mesh " + describeMeshShape(shape);
  std::set<std::string> seen;
  for (const auto& dim : shape) {
    if (dim.name.empty()) throw ConfigError(mesh + ": a dimension has an empty name; expected a name for each");
    if (!usableName(dim.name)) {
      throw ConfigError(mesh + ": dimension name '" + dim.name +
                        "' has a character other than letters, digits, '_' and '-'");
    }
    if (!seen.insert(dim.name).second) {
      throw ConfigError(mesh + ": dimension '" + dim.name + "' is named twice; expected unique names");
    }
  }
}

void checkSizes(const MeshShape& shape, int world_size) {
  const std::string mesh = "device mesh " + describeMeshShape(shape);
  int64_t product = 1;
  for (const auto& dim : shape) {
    if (dim.size < 1) {
      throw ConfigError(mesh + ": dimension '" + dim.name + "' has size " + std::to_string(dim.size) +
                        "; expected a size >= 1");
    }
    // Past any world size the product stops growing, so it cannot overflow.
    if (product <= std::numeric_limits<int>::max()) product *= dim.size;
  }
  if (product != world_size) {
    constexpr int kLargest = std::numeric_limits<int>::max();
    const std::string covers =
        product > kLargest ? "more than " + std::to_string(kLargest) : std::to_string(product);
    throw ConfigError(mesh + " covers " + covers + " ranks but the world has " + std::to_string(world_size) +
                      "; expected the sizes' product to be the world size");
  }
}

}  // namespace

std::string describeMeshShape(const MeshShape& shape) {
  std::string text;
  for (const auto& dim : shape) {
    text += (text.empty() ? "" : ", ") + dim.name + "=" + std::to_string(dim.size);
  }
  return "(" + text + ")";
}

MeshLayout::MeshLayout(MeshShape shape, int world_size) : shape_(std::move(shape)), world_size_(world_size) {
  if (world_size_ < 1) {
    throw ConfigError("device mesh " + describeMeshShape(shape_) + ": the world has " +
                      std::to_string(world_size_) + " ranks; expected at least 1");
  }
  if (shape_.empty()) throw ConfigError("device mesh (): expected at least one dimension");
  checkNames(shape_);
  checkSizes(shape_, world_size_);
  strides_.assign(shape_.size(), 1);
  for (size_t i = shape_.size() - 1; i > 0; --i) strides_[i - 1] = strides_[i] * shape_[i].size;
}

int MeshLayout::dimensionIndex(const std::string& name) const {
  std::vector<std::string> names;
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (shape_[i].name == name) return static_cast<int>(i);
    names.push_back(shape_[i].name);
  }
  throw ConfigError("device mesh " + describeMeshShape(shape_) + " has no dimension '" + name +
                    "'; its dimensions: " + joined(names, ", "));
}

int MeshLayout::size(const std::string& name) const { return shape_[dimensionIndex(name)].size; }

void MeshLayout::checkRank(int rank) const {
  if (rank < 0 || rank >= world_size_) {
    throw ConfigError("device mesh " + describeMeshShape(shape_) + ": rank " + std::to_string(rank) +
                      " is outside the world; expected 0.." + std::to_string(world_size_ - 1));
  }
}

std::vector<int> MeshLayout::coordinatesOf(int rank) const {
  checkRank(rank);
  std::vector<int> coordinates(shape_.size());
  for (size_t i = 0; i < shape_.size(); ++i) coordinates[i] = rank / strides_[i] % shape_[i].size;
  return coordinates;
}

int MeshLayout::rankOf(const std::vector<int>& coordinates) const {
  if (coordinates.size() != shape_.size()) {
    throw ConfigError("device mesh " + describeMeshShape(shape_) + ": " + std::to_string(coordinates.size()) +
                      " coordinates; expected " + std::to_string(shape_.size()));
  }
  int rank = 0;
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (coordinates[i] < 0 || coordinates[i] >= shape_[i].size) {
      throw ConfigError("device mesh " + describeMeshShape(shape_) + ": coordinate " +
                        std::to_string(coordinates[i]) + " along '" + shape_[i].name + "'; expected 0.." +
                        std::to_string(shape_[i].size - 1));
    }
    rank += coordinates[i] * strides_[i];
  }
  return rank;
}

std::vector<int> MeshLayout::dimensionIndices(const std::vector<std::string>& dims) const {
  const std::string mesh = "device mesh " + describeMeshShape(shape_);
  if (dims.empty()) throw ConfigError(mesh + ": a group over no dimension; expected at least one");
  std::vector<int> indices;
  for (const auto& name : dims) {
    const int index = dimensionIndex(name);
    for (int seen : indices) {
      if (seen == index) throw ConfigError(mesh + ": dimension '" + name + "' is named twice in " + listed(dims));
    }
    if (!indices.empty() && index < indices.back()) {
      throw ConfigError(mesh + ": dimensions " + listed(dims) + " are out of mesh order; expected outermost first");
    }
    indices.push_back(index);
  }
  return indices;
}

std::vector<int> MeshLayout::groupRanks(int rank, const std::vector<std::string>& dims) const {
  const std::vector<int> indices = dimensionIndices(dims);
  std::vector<int> coordinates = coordinatesOf(rank);
  int count = 1;
  for (int index : indices) count *= shape_[index].size;
  std::vector<int> ranks;
  ranks.reserve(count);
  for (int n = 0; n < count; ++n) {
    // n's row-major digits over `indices`, the last innermost.
    int rest = n;
    for (size_t k = indices.size(); k-- > 0;) {
      coordinates[indices[k]] = rest % shape_[indices[k]].size;
      rest /= shape_[indices[k]].size;
    }
    ranks.push_back(rankOf(coordinates));
  }
  return ranks;
}

int MeshLayout::groupIndex(int rank, const std::vector<std::string>& dims) const {
  const std::vector<int> indices = dimensionIndices(dims);
  const std::vector<int> coordinates = coordinatesOf(rank);
  int group = 0;
  for (size_t i = 0; i < shape_.size(); ++i) {
    bool in_group = false;
    for (int index : indices) in_group = in_group || index == static_cast<int>(i);
    if (!in_group) group = group * shape_[i].size + coordinates[i];
  }
  return group;
}

int MeshLayout::groupRank(int rank, const std::vector<std::string>& dims) const {
  const std::vector<int> coordinates = coordinatesOf(rank);
  int place = 0;
  for (int index : dimensionIndices(dims)) place = place * shape_[index].size + coordinates[index];
  return place;
}

DeviceMesh::DeviceMesh(MeshShape shape, std::shared_ptr<Store> store, int rank, int world_size,
                       DeviceMeshOptions options)
    : layout_(std::move(shape), world_size), rank_(rank), store_(std::move(store)), options_(std::move(options)) {
  const std::string mesh = "device mesh " + describeMeshShape(layout_.shape());
  layout_.coordinatesOf(rank_);  // checks the rank
  if (const auto& world = options_.world_communicator;
      world && (world->size() != world_size || world->rank() != rank)) {
    throw ConfigError(mesh + ": the world communicator is rank " + std::to_string(world->rank()) + " of " +
                      std::to_string(world->size()) + "; expected rank " + std::to_string(rank) + " of " +
                      std::to_string(world_size));
  }
  for (const auto& dim : layout_.shape()) flatten({dim.name});
  for (const auto& dims : options_.flattened) flatten(dims);
}

DeviceMesh::DeviceMesh(MeshShape shape, const World& world, DeviceMeshOptions options)
    : DeviceMesh(std::move(shape), world.store, world.rank, world.size, std::move(options)) {}

int DeviceMesh::coordinate(const std::string& dim) const {
  return layout_.coordinatesOf(rank_)[layout_.dimensionIndex(dim)];
}

std::vector<int> DeviceMesh::groupRanks(const std::vector<std::string>& dims) const {
  return layout_.groupRanks(rank_, dims);
}

std::string DeviceMesh::groupKey(const std::vector<std::string>& dims) const {
  std::vector<std::string> spanning;
  for (int index : layout_.dimensionIndices(dims)) {
    if (layout_.shape()[index].size > 1) spanning.push_back(layout_.shape()[index].name);
  }
  return joined(spanning, "+");
}

std::shared_ptr<Communicator> DeviceMesh::communicator(const std::string& dim) const {
  return communicator(std::vector<std::string>{dim});
}

std::shared_ptr<Communicator> DeviceMesh::communicator(const std::vector<std::string>& dims) const {
  const std::string key = groupKey(dims);
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = groups_.find(key);
  if (found == groups_.end() || !found->second) {
    throw ConfigError("device mesh " + describeMeshShape(layout_.shape()) + ": no group over " + listed(dims) +
                      " was created; flatten it on every rank first (or list it in DeviceMeshOptions::flattened)");
  }
  return found->second;
}

std::shared_ptr<Communicator> DeviceMesh::flatten(const std::vector<std::string>& dims) {
  const std::string key = groupKey(dims);
  std::lock_guard<std::mutex> lock(mutex_);
  auto& group = groups_[key];
  if (!group) group = createGroup(dims, key);
  return group;
}

std::shared_ptr<Communicator> DeviceMesh::createGroup(const std::vector<std::string>& dims,
                                                      const std::string& key) {
  const std::vector<int> ranks = layout_.groupRanks(rank_, dims);
  const int size = static_cast<int>(ranks.size());
  if (size == layout_.worldSize() && options_.world_communicator) return options_.world_communicator;
  CommunicatorOptions options = options_.communicator;
  options.store_prefix = key.empty()
      ? options_.store_prefix + "/rank/" + std::to_string(rank_)
      : options_.store_prefix + "/group/" + key + "/" + std::to_string(layout_.groupIndex(rank_, dims));
  return createCommunicator(options_.backend, store_, layout_.groupRank(rank_, dims), size, options);
}

std::shared_ptr<Communicator> DeviceMesh::pair(const std::string& dim, int first, int second,
                                               const std::string& name) {
  const int me = coordinate(dim);
  if (first == second || (me != first && me != second) || first < 0 || second < 0 || first >= size(dim) ||
      second >= size(dim)) {
    throw ConfigError("mesh dimension '" + dim + "': a pair of its coordinates " + std::to_string(first) + " and " +
                      std::to_string(second) + " for rank " + std::to_string(rank_) + " at " + std::to_string(me) +
                      "; expected two different coordinates below " + std::to_string(size(dim)) +
                      ", one of them this rank's");
  }
  CommunicatorOptions options = options_.communicator;
  options.store_prefix = options_.store_prefix + "/pair/" + name + "/" + dim + "/" +
                         std::to_string(layout_.groupIndex(rank_, {dim})) + "/" + std::to_string(first) + "-" +
                         std::to_string(second);
  return createCommunicator(options_.backend, store_, me == first ? 0 : 1, 2, options);
}

}  // namespace dtrain
