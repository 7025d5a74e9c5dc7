#include "data/token_shard_set.h"

#include <dirent.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <stdexcept>
#include <utility>

#include "common/error.h"
#include "common/files.h"

namespace dtrain::data {

namespace {

// POSIX calls, not std::filesystem: PyTorch's 2.x wheels export a clashing
// copy of it, which binds first in the training runtime.

bool isPattern(const std::string& spec) { return spec.find_first_of("*?[") != std::string::npos; }

std::string splitFilter(const std::string& split) { return split.empty() ? "*.bin" : "*_" + split + "_*.bin"; }

std::vector<std::string> listDirectory(const std::string& dir, const std::string& split) {
  const std::unique_ptr<DIR, int (*)(DIR*)> handle(::opendir(dir.c_str()), &::closedir);
  if (!handle) throw errnoError("opendir", errno, "cannot list token shard directory '" + dir + "'");
  const std::string infix = "_" + split + "_";
  const std::string prefix = dir.back() == '/' ? dir : dir + "/";
  std::vector<std::string> paths;
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(handle.get());
    if (entry == nullptr) break;
    const std::string name = entry->d_name;
    const bool is_bin = name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0;
    if (!is_bin || name[0] == '.') continue;
    if (!split.empty() && name.find(infix) == std::string::npos) continue;
    paths.push_back(prefix + name);
  }
  if (errno != 0) throw errnoError("readdir", errno, "cannot list token shard directory '" + dir + "'");
  if (paths.empty()) {
    throw ConfigError("token shard directory '" + dir + "' has no " + splitFilter(split) +
                      " file; expected llm.c's token shards (e.g. fineweb_" + (split.empty() ? "train" : split) +
                      "_000001.bin)");
  }
  return paths;
}

std::vector<std::string> expandPattern(const std::string& pattern) {
  glob_t found{};
  const int rc = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &found);
  std::vector<std::string> paths;
  if (rc == 0) paths.assign(found.gl_pathv, found.gl_pathv + found.gl_pathc);
  ::globfree(&found);
  if (rc != 0 && rc != GLOB_NOMATCH) {
    throw IoError("cannot expand token shard pattern '" + pattern + "': glob() failed (" +
                  (rc == GLOB_NOSPACE ? "out of memory" : "a directory could not be read") + ")");
  }
  if (paths.empty()) {
    throw ConfigError("token shard pattern '" + pattern +
                      "' matches no file; expected it to match llm.c's token shards (e.g. data/fineweb_train_*.bin)");
  }
  return paths;
}

}  // namespace

std::vector<std::string> findTokenShards(const std::string& spec, const std::string& split) {
  if (spec.empty()) {
    throw ConfigError("token shards: empty path; expected a shard file, a directory of shards or a glob pattern");
  }
  std::vector<std::string> paths;
  if (isDirectory(spec)) {
    paths = listDirectory(spec, split);
  } else if (isPattern(spec)) {
    paths = expandPattern(spec);
  } else {
    paths = {spec};
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::shared_ptr<TokenShardSet> TokenShardSet::open(const std::string& spec, const std::string& split,
                                                   int64_t vocab_size) {
  std::string origin = "'" + spec + "'";
  if (!split.empty() && !isPattern(spec)) origin += " (" + splitFilter(split) + ")";
  return std::make_shared<TokenShardSet>(findTokenShards(spec, split), vocab_size, origin);
}

TokenShardSet::TokenShardSet(const std::vector<std::string>& paths, int64_t vocab_size, std::string origin)
    : origin_(std::move(origin)) {
  if (paths.empty()) {
    throw ConfigError("token shard set " + origin_ + " is empty; expected at least one shard file");
  }
  shards_.reserve(paths.size());
  offsets_.reserve(paths.size() + 1);
  offsets_.push_back(0);
  for (const std::string& path : paths) {
    shards_.emplace_back(path, vocab_size);
    offsets_.push_back(offsets_.back() + shards_.back().size());
  }
}

void TokenShardSet::copyTokens(int64_t begin, int64_t count, int64_t* out) const {
  if (begin < 0 || count < 0 || begin > size() - count) {
    throw std::out_of_range(describe() + ": tokens [" + std::to_string(begin) + ", " +
                            std::to_string(begin + count) + ") requested");
  }
  // The last shard starting at or before `begin` (empty shards are skipped).
  size_t shard = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), begin) - offsets_.begin()) - 1;
  while (count > 0) {
    const int64_t local = begin - offsets_[shard];
    const int64_t take = std::min(count, shards_[shard].size() - local);
    shards_[shard].copyTokens(local, take, out);
    begin += take;
    out += take;
    count -= take;
    ++shard;
  }
}

std::string TokenShardSet::describe() const {
  const size_t n = shards_.size();
  // One shard is named: it is the file the user has to look at.
  if (n == 1) return "1 token shard '" + shards_[0].path() + "' (" + std::to_string(size()) + " tokens)";
  return std::to_string(n) + " token shards (" + std::to_string(size()) + " tokens) from " + origin_;
}

}  // namespace dtrain::data
