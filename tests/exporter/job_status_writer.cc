// Stands in for a training job's rank 0 in the exporter's tests: writes the
// status file of job argv[1] into DTRAIN_JOBS_DIR as `dtrain train` does,
// prints "written <path>", then waits for a signal it does not catch (as a
// rank killed by SIGTERM or SIGKILL, it never removes its file).
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "metrics/job_status.h"

int main(int argc, char** argv) {
  using namespace dtrain::metrics;
  if (argc != 2) {
    std::fprintf(stderr, "usage: job_status_writer JOB\n");
    return 2;
  }
  const ProcessIdentity self = thisProcess();
  const nlohmann::json status{{"job", argv[1]},     {"world_size", 1},
                              {"samples_per_s", 10}, {"pid", self.pid},
                              {"start_time", self.start_time}, {"pid_ns", self.pid_namespace}};
  const std::string path = jobStatusPath(jobsDirectory(), argv[1]);
  std::string why;
  if (!writeJobStatus(path, status.dump(), &why)) {
    std::fprintf(stderr, "job_status_writer: %s\n", why.c_str());
    return 1;
  }
  std::printf("written %s\n", path.c_str());
  std::fflush(stdout);
  while (true) ::pause();
}
