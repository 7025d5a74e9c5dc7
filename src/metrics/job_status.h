// Job status files: each training job's rank 0 keeps <job>.json in its
// user's folder of the jobs directory, <jobs dir>/<uid>/, rewritten at each
// log interval and removed at the end (train/train_metrics.h writes it
// through here); `dtrain exporter` lists them on its live page
// (GET /api/jobs).
//
// Who may write what: the jobs directory is shared (created 1777, sticky,
// as /tmp), each user's folder is created 0755 by that user and a writer
// refuses one that is not its own, so no user can overwrite or remove
// another's files while every user's jobs can be listed. A file names the
// process that writes it (pid, start time, PID namespace); the lister
// drops, and removes where it may, the files of processes that are gone or
// whose pid a later process took (a rank killed by SIGKILL or SIGTERM
// never removes its file).
#pragma once

#include <string>
#include <vector>

namespace dtrain::metrics {

// DTRAIN_JOBS_DIR, else /tmp/dtrain-jobs.
std::string jobsDirectory();

// The status file of `job` of this process's user in `dir`:
// <dir>/<effective uid>/<job>.json (characters of the job other than
// letters, digits, '-', '_' and '.' become '_').
std::string jobStatusPath(const std::string& dir, const std::string& job);

// Writes `json_text` to `path` atomically (temporary file, rename),
// creating the jobs directory (1777) and the user's folder (0755) if
// needed. False, leaving no partial file, when the OS refuses or when the
// user's folder is not a directory owned by this user (a link, another
// user's); `why` (if given) then says so, naming the path.
bool writeJobStatus(const std::string& path, const std::string& json_text, std::string* why = nullptr);

// What tells a process apart from a later one given the same pid: the pid,
// its start time (clock ticks after boot, /proc/<pid>/stat field 22) and
// its PID namespace ("pid:[4026531836]"). A status file carries these as
// "pid", "start_time" and "pid_ns".
struct ProcessIdentity {
  long pid = 0;
  unsigned long long start_time = 0;
  std::string pid_namespace;
};
ProcessIdentity thisProcess();

struct JobList {
  // A JSON array of the live jobs' status objects, sorted by job, each with
  // "rank" (0 when the file does not say) and "uid" (its folder's).
  std::string json;
  // Why some jobs could not be listed: a user's folder or file this process
  // may not read, a folder owned by another user than its name says. One
  // line each, naming the path; the same line on every call while the
  // cause lasts (the caller reports each once).
  std::vector<std::string> unreadable;
};

// The jobs in `dir`'s user folders. A file whose process is gone (no such
// pid, a zombie, or a pid now held by a process started at another time)
// is left out and removed when this process may; a file from another PID
// namespace is listed (its process cannot be checked from here).
// Unparsable or partial files are skipped; a missing directory gives "[]".
JobList listJobs(const std::string& dir);

}  // namespace dtrain::metrics
