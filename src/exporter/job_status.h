// The training jobs running on this node, for the live page (GET /api/jobs):
// each job's rank 0 keeps <job>.json in the jobs directory, rewritten at each
// log interval and removed at the end (train/train_metrics.h writes it).
#pragma once

#include <string>

namespace dtrain::exporter {

// DTRAIN_JOBS_DIR, else /tmp/dtrain-jobs.
std::string jobsDirectory();

// A JSON array of the status files' objects in `dir`, sorted by job, each
// with "rank" (0 when the file does not say). Unreadable or partial files
// are skipped; a missing directory gives "[]".
std::string jobsJson(const std::string& dir);

}  // namespace dtrain::exporter
