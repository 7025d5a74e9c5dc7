// JobCheckpoint::resume() and the steps it takes (job_checkpoint.h).
#include <exception>
#include <optional>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checkpoint_sharded.h"
#include "checkpoint/meta_checks.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "train/job_checkpoint.h"
#include "train/job_checkpoint_legacy.h"
#include "train/job_checkpoint_steps.h"

namespace dtrain {
namespace {

using namespace checkpoint_steps;  // NOLINT: this file's half of JobCheckpoint

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

std::string messageOf(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.message();
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

// What rank 0 tells the others about --resume (small integers, exact in
// the doubles of an all-reduce).
struct JobCheckpoint::Candidate {
  enum Kind { kNothing = 0, kSharded = 1, kFile = 2, kSlabFile = 3, kError = 4 };
  int64_t kind = kNothing;
  int64_t error = kOk;  // kError: ConfigError or IoError
  int64_t step = 0;     // of the checkpoint's name (auto)
  TrainPosition position;
  int64_t world_size = 0;  // the data-parallel ranks of the job that wrote it
  int64_t batch_size = 0;
  std::exception_ptr thrown;  // rank 0's error
};

// Rank 0: the checkpoint --resume names, with what its meta says. With
// auto, one that is incomplete or whose metadata (or slab-layout file)
// does not load is skipped with a warning; otherwise its error is kept.
JobCheckpoint::Candidate JobCheckpoint::pick(const std::vector<int64_t>& rejected,
                                             std::optional<CheckpointState>& slab_state) const {
  const bool automatic = options_.resume == "auto" || options_.resume == "auto-or-fresh";
  std::vector<int64_t> skip = rejected;
  for (;;) {
    Candidate c;
    try {
      std::string path = checkpointLocation(options_.resume);
      if (automatic) {
        const std::optional<std::string> found = newestCompleteCheckpoint(options_.dir, kPrefix, skip);
        if (!found) {
          // Complete checkpoints there, none valid (corrupt, not merely a
          // write that died): starting over would train on top of them as
          // if resumed; only auto-or-fresh does.
          std::vector<std::string> there;
          for (const std::string& p : listCheckpointPaths(options_.dir, kPrefix)) {
            if (missingCheckpointParts(p).empty()) there.push_back(p);
          }
          if (options_.resume == "auto" && !there.empty()) {
            c.kind = Candidate::kError;
            c.thrown = std::make_exception_ptr(ConfigError(
                "--resume auto: none of the " + std::to_string(there.size()) + " complete checkpoint(s) in '" +
                options_.dir + "' is valid (newest: " + there.front() + "; each was skipped with a warning saying "
                "why); refusing to start from step 0 over them: remove them, or pass --resume auto-or-fresh to "
                "start afresh"));
            c.error = kConfigError;
          }
          return c;
        }
        path = *found;
        c.step = checkpointStepOf(path.substr(path.rfind('/') + 1), kPrefix);
      }
      nlohmann::json meta;
      std::string meta_file = path;
      if (isDirectory(path)) {
        if (!isShardedCheckpointDir(path)) {
          throw ConfigError("--resume " + path + " is a directory but no checkpoint (expected a checkpoint file, a "
                            "sharded checkpoint's directory or its " + kShardedMetadataFile + ")");
        }
        const std::vector<std::string> missing = missingCheckpointParts(path);
        if (!missing.empty()) throw ConfigError("checkpoint " + path + " is incomplete: " + joined(missing));
        meta = readShardedMetadata(path).meta;
        meta_file = path + "/" + kShardedMetadataFile;
        c.kind = Candidate::kSharded;
      } else {
        meta = CheckpointFile(path).meta();
        c.kind = isSlabLayoutCheckpoint(meta) ? Candidate::kSlabFile : Candidate::kFile;
      }
      const TrainCheckpointMeta m = checkTrainCheckpointMeta(meta_file, meta, MetaFields::kAllForResume);
      if (c.kind == Candidate::kSlabFile) slab_state = loadCheckpoint(path);  // verified whole, as before
      c.position = {m.epoch, m.batch, m.step};
      c.world_size = m.data_ranks > 0 ? m.data_ranks : m.world_size;
      c.batch_size = m.batch_size;
      // A valid checkpoint of another job is no reason to look for an older one.
      if (std::exception_ptr mismatch = mismatchWithThisJob(meta_file, m)) {
        c.kind = Candidate::kError;
        c.error = kConfigError;
        c.thrown = mismatch;
      }
      return c;
    } catch (const std::exception&) {
      if (!automatic) {
        c.kind = Candidate::kError;
        c.thrown = std::current_exception();
        c.error = outcomeOf(c.thrown);
        return c;
      }
      DTRAIN_LOG_WARN("skipping an invalid checkpoint: " << messageOf(std::current_exception()));
      skip.push_back(c.step);
    }
  }
}

// Rank 0: what the checkpoint's meta says against what this job runs
// (world size and batch size may differ: checkpoints reshard).
std::exception_ptr JobCheckpoint::mismatchWithThisJob(const std::string& meta_file,
                                                      const TrainCheckpointMeta& meta) const {
  const std::string optimizer = job_.optimizer().name();
  if (meta.model != identity_.model) {
    return std::make_exception_ptr(ConfigError("checkpoint " + meta_file + ": field 'model': the checkpoint is of '" +
                                               meta.model + "', this job trains '" + identity_.model +
                                               "' (--model)"));
  }
  if (meta.optimizer != optimizer) {
    return std::make_exception_ptr(ConfigError("checkpoint " + meta_file + ": field 'optimizer': the checkpoint holds "
                                               "the state of '" + meta.optimizer + "', this job runs '" + optimizer +
                                               "' (--optimizer)"));
  }
  if (meta.lora != identity_.lora) {
    // Adapters trained over one base mean nothing over another.
    const auto text = [](const std::map<std::string, std::string>& lora) {
      if (lora.empty()) return std::string("none (the whole model trains)");
      std::string t;
      for (const auto& [key, value] : lora) t += (t.empty() ? "" : ", ") + key + " '" + value + "'";
      return t;
    };
    return std::make_exception_ptr(ConfigError("checkpoint " + meta_file + ": field 'lora': the checkpoint's LoRA "
                                               "adapters are " + text(meta.lora) + ", this job's " +
                                               text(identity_.lora) + " (--lora-rank, --lora-alpha, --lora-targets, "
                                               "--init-from)"));
  }
  return nullptr;
}

// Rank 0's candidate, told to every rank (its exception stays on rank 0).
JobCheckpoint::Candidate JobCheckpoint::agree(const Candidate& mine) const {
  std::vector<double> wire = {static_cast<double>(mine.kind),           static_cast<double>(mine.error),
                              static_cast<double>(mine.step),           static_cast<double>(mine.position.epoch),
                              static_cast<double>(mine.position.batch), static_cast<double>(mine.position.step),
                              static_cast<double>(mine.world_size),     static_cast<double>(mine.batch_size)};
  job_.context().allreduceSum(wire);  // only rank 0's is non-zero
  Candidate c;
  c.kind = asInt(wire[0]);
  c.error = asInt(wire[1]);
  c.step = asInt(wire[2]);
  c.position = {asInt(wire[3]), asInt(wire[4]), asInt(wire[5])};
  c.world_size = asInt(wire[6]);
  c.batch_size = asInt(wire[7]);
  c.thrown = mine.thrown;
  return c;
}

// Every rank checks the CRCs of its share of the checkpoint's files, then
// reads what it holds. False (with a warning) when `may_skip` and some
// rank found it bad; its error otherwise.
bool JobCheckpoint::loadVerified(const std::string& path, bool may_skip) {
  Context& ctx = job_.context();
  const auto start = Clock::now();
  std::unique_ptr<CheckpointReader> reader;
  std::exception_ptr error;
  try {
    reader = std::make_unique<CheckpointReader>(path);
    const size_t files = reader->files().size();
    for (size_t i = static_cast<size_t>(ctx.rank()); i < files; i += static_cast<size_t>(ctx.size())) {
      reader->verifyFile(i);
    }
  } catch (const IoError& e) {
    // Most likely a rank that does not see the files at all.
    error = std::make_exception_ptr(IoError(e.message() + " (every rank reads the checkpoint: is --checkpoint-dir on "
                                            "a file system all ranks see?)"));
  } catch (const std::exception&) {
    error = std::current_exception();
  }
  const auto outcomes = exchange(ctx, {static_cast<double>(outcomeOf(error))});
  int failed = -1;
  bool unreadable = false;
  for (size_t r = 0; r < outcomes.size(); ++r) {
    if (failed < 0 && asInt(outcomes[r][0]) != kOk) failed = static_cast<int>(r);
    unreadable = unreadable || asInt(outcomes[r][0]) == kIoError;
  }
  // A corrupt checkpoint is passed over for an older one; one that a rank
  // cannot read at all is an error (an older one would not read either).
  if (failed >= 0 && may_skip && !unreadable) {
    if (error) DTRAIN_LOG_WARN("skipping an invalid checkpoint: " << messageOf(error));
    if (!error && ctx.isMain()) {
      DTRAIN_LOG_WARN("skipping an invalid checkpoint " << path << ": rank " << failed << " found it bad (its warning says why)");
    }
    return false;
  }
  throwIfAnyFailed(outcomes, error, "--resume " + path);
  const double checked_s = secondsSince(start);
  int64_t bytes = 0;
  try {
    bytes = layout().restore(*reader, options_.allow_nonfinite);
  } catch (const std::exception&) {
    error = std::current_exception();
  }
  throwIfAnyFailed(exchange(ctx, {static_cast<double>(outcomeOf(error))}), error, "restoring from " + path);
  if (ctx.isMain()) {
    DTRAIN_LOG_INFO("loaded checkpoint " << path << " (" << reader->worldSize() << " shard(s)"
                                         << (reader->stage().empty() ? "" : ", --shard " + reader->stage())
                                         << "): checked in " << seconds(checked_s) << ", rank 0 read " << gib(bytes)
                                         << " in " << seconds(secondsSince(start) - checked_s));
  }
  return true;
}

TrainPosition JobCheckpoint::resume() {
  Context& ctx = job_.context();
  const std::string& resume = options_.resume;
  if (resume.empty() || resume == "none") return {};
  const bool automatic = resume == "auto" || resume == "auto-or-fresh";
  if (automatic && options_.dir.empty()) throw ConfigError("--resume " + resume + " needs --checkpoint-dir");
  std::vector<int64_t> rejected;
  for (;;) {
    std::optional<CheckpointState> slab_state;
    const Candidate c = agree(ctx.isMain() ? pick(rejected, slab_state) : Candidate{});
    if (c.kind == Candidate::kError) {
      if (c.thrown) std::rethrow_exception(c.thrown);
      const std::string why = "--resume " + resume + ": rank 0 could not read the checkpoint (see its error)";
      if (c.error == kConfigError) throw ConfigError(why);
      throw IoError(why);
    }
    if (c.kind == Candidate::kNothing) {
      if (ctx.isMain()) {
        if (listCheckpointPaths(options_.dir, kPrefix).empty()) {
          DTRAIN_LOG_INFO("--resume " << resume << ": no checkpoint in '" << options_.dir << "', starting from step 0");
        } else {
          DTRAIN_LOG_WARN("--resume " << resume << ": no checkpoint in '" << options_.dir
                                      << "' is valid; starting from step 0");
        }
      }
      return {};
    }
    const std::string path = automatic ? options_.dir + "/" + checkpointStem(kPrefix, c.step) +
                                             (c.kind == Candidate::kSharded ? "" : ".dtck")
                                       : checkpointLocation(resume);
    if (c.kind == Candidate::kSlabFile) {
      restoreSlabLayoutCheckpoint(job_, path, slab_state ? &*slab_state : nullptr, options_.allow_nonfinite);
    } else if (!loadVerified(path, automatic)) {
      rejected.push_back(c.step);
      invalid_paths_.insert(path);  // never one of the --keep checkpoints
      continue;
    }
    resumed_path_ = path;
    resumed_step_ = c.position.step;
    TrainPosition position = c.position;
    if ((c.world_size != job_.dataRanks() || c.batch_size != identity_.batch_size) && position.batch != 0) {
      if (ctx.isMain()) {
        DTRAIN_LOG_WARN("checkpoint at step " << position.step << " was written by " << c.world_size
                                              << " data-parallel rank(s) x batch " << c.batch_size << "; this job has "
                                              << job_.dataRanks()
                                              << " x " << identity_.batch_size
                                              << ", so it resumes at the start of epoch " << position.epoch + 2);
      }
      position = {position.epoch + 1, 0, position.step};
    }
    if (ctx.isMain()) {
      DTRAIN_LOG_INFO("resuming from " << path << " (step " << position.step << ", epoch " << position.epoch + 1
                                       << ", batch " << position.batch << ")");
    }
    return position;
  }
}

}  // namespace dtrain
