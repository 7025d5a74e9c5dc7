#include "data/token_shard_series.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>

#include "common/error.h"
#include "common/files.h"
#include "data/token_shard.h"

namespace dtrain::data {
namespace {

bool isShardOf(const std::string& file, const std::string& name) {
  if (!file.ends_with(".bin")) return false;
  return file.starts_with(name + "_train_") || file.starts_with(name + "_val_");
}

void refuseExistingShards(const std::string& dir, const std::string& name) {
  std::unique_ptr<DIR, int (*)(DIR*)> listing(::opendir(dir.c_str()), ::closedir);
  if (!listing) throw errnoError("opendir", errno, "cannot list the output directory " + dir);
  while (const dirent* entry = ::readdir(listing.get())) {
    if (isShardOf(entry->d_name, name)) {
      throw ConfigError("output directory " + dir + " already holds shards named " + name + "_*.bin (" +
                        entry->d_name + "); remove them, or choose another --out or --name");
    }
  }
}

}  // namespace

TokenShardSeriesWriter::TokenShardSeriesWriter(std::string dir, std::string name, int64_t shard_tokens,
                                               int64_t vocab_size)
    : dir_(std::move(dir)), name_(std::move(name)), shard_tokens_(shard_tokens), vocab_size_(vocab_size) {
  if (name_.empty() || name_.find('/') != std::string::npos || name_ == "." || name_ == "..") {
    throw ConfigError("shard name '" + name_ + "' is not a plain file name; expected a name such as 'fortunes'");
  }
  if (shard_tokens_ < 1) throw ConfigError("shard size " + std::to_string(shard_tokens_) + ": expected >= 1 token");
  if (dir_.empty()) throw ConfigError("no output directory given for the token shards");
  struct stat st {};
  if (::stat(dir_.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw ConfigError("output directory " + dir_ + " exists but is not a directory");
    refuseExistingShards(dir_, name_);
  }
}

void TokenShardSeriesWriter::append(std::span<const uint32_t> tokens, bool validation) {
  if (validation && training_started_) {
    throw ConfigError("token shards: validation tokens after training tokens; the validation split comes first");
  }
  if (!validation && !training_started_) {
    training_started_ = true;
    if (!buffer_.empty()) flush();  // the validation split ends with its own shard
    buffer_validation_ = false;
  }
  while (!tokens.empty()) {
    const size_t room = static_cast<size_t>(shard_tokens_) - buffer_.size();
    const size_t take = std::min(room, tokens.size());
    buffer_.insert(buffer_.end(), tokens.begin(), tokens.begin() + take);
    tokens = tokens.subspan(take);
    if (buffer_.size() == static_cast<size_t>(shard_tokens_)) flush();
  }
}

const std::vector<WrittenShard>& TokenShardSeriesWriter::finish() {
  if (!buffer_.empty()) flush();
  return written_;
}

void TokenShardSeriesWriter::removeWritten() {
  for (const WrittenShard& shard : written_) ::unlink(shard.path.c_str());
  written_.clear();
}

void TokenShardSeriesWriter::flush() {
  // Made with the first shard, so that input refused later leaves nothing behind.
  if (written_.empty()) {
    if (const int err = makeDirectories(dir_)) {
      throw errnoError("mkdir", err, "cannot create the output directory " + dir_);
    }
  }
  char index[16];
  std::snprintf(index, sizeof(index), "%06zu", written_.size());
  const std::string path = dir_ + "/" + name_ + (buffer_validation_ ? "_val_" : "_train_") + index + ".bin";
  writeTokenShard(path, buffer_, vocab_size_);
  written_.push_back({path, buffer_validation_, static_cast<int64_t>(buffer_.size())});
  buffer_.clear();
}

}  // namespace dtrain::data
