// Job status files: each training job's rank 0 keeps <job>.json in the jobs
// directory, rewritten at each log interval and removed at the end
// (train/train_metrics.h writes it through here); `dtrain exporter` lists
// them on its live page (GET /api/jobs).
#pragma once

#include <string>

namespace dtrain::metrics {

// DTRAIN_JOBS_DIR, else /tmp/dtrain-jobs.
std::string jobsDirectory();

// The status file of `job` in `dir` (characters other than letters, digits,
// '-', '_' and '.' become '_').
std::string jobStatusPath(const std::string& dir, const std::string& job);
// Writes `json_text` to `path` atomically (temporary file, rename),
// creating the directory if needed. False, leaving no partial file, when
// the OS refuses.
bool writeJobStatus(const std::string& path, const std::string& json_text);

// A JSON array of the status files' objects in `dir`, sorted by job, each
// with "rank" (0 when the file does not say). Unreadable or partial files
// are skipped; a missing directory gives "[]".
std::string jobsJson(const std::string& dir);

}  // namespace dtrain::metrics
