// `dtrain bench <collective>` started as nccl-tests is, by srun or mpirun:
// real processes on loopback that carry only the launcher's variables
// (SLURM_*, OMPI_COMM_WORLD_*, PMI_*), no RANK or WORLD_SIZE.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/command.h"
#include "tests/support/ports.h"

namespace dtrain::testing {
namespace {

// Starts `n` copies of a small all-reduce, copy r with `env_of(r)` and none of
// torchrun's variables; exits with the first failure.
template <typename EnvOf>
CommandResult startLikeALauncher(int n, EnvOf env_of, const std::string& extra = "") {
  std::string script = "pids=(); ";
  for (int r = 0; r < n; ++r) {
    script += "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT "
              "-u SLURM_JOB_NODELIST -u SLURM_STEP_NODELIST " +
              env_of(r) + " " + dtrainBin() + " bench allreduce --backend gloo -b 8 -e 4K -f 8 -n 2 -w 0 " + extra +
              " & pids+=($!); ";
  }
  script += "rc=0; for p in \"${pids[@]}\"; do wait $p || rc=$?; done; exit $rc";
  return runCommand(script, 90);
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void expectOneTableOf(const CommandResult& r, int processes) {
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "# dtrain bench allreduce: gloo on cpu (" + std::to_string(processes) + " processes)"),
            1) << r.output;
  EXPECT_EQ(count(r.output, "# Avg bus bandwidth"), 1) << r.output;
  EXPECT_EQ(count(r.output, "# Out of bounds values : 0 OK"), 1) << r.output;
  EXPECT_EQ(count(r.output, "        4096          1024     float     sum      -1"), 1) << r.output;
}

// A free port p as 10000 + SLURM_JOB_ID mod 50000 derives it: the job id.
int slurmJobIdForAFreePort() {
  for (;;) {
    int port = freePort();
    if (port >= 10000 && port < 60000) return 50000 * 7 + (port - 10000);
  }
}

TEST(BenchLauncherTest, SrunVariablesFormOneJobThroughTheFirstHostOfTheNodeList) {
  const std::string job_id = std::to_string(slurmJobIdForAFreePort());
  auto r = startLikeALauncher(3, [&](int rank) {
    return "SLURM_PROCID=" + std::to_string(rank) + " SLURM_NTASKS=3 SLURM_LOCALID=" + std::to_string(rank) +
           " SLURM_JOB_ID=" + job_id + " SLURM_JOB_NODELIST=localhost,node[2-3]";
  });
  expectOneTableOf(r, 3);
}

TEST(BenchLauncherTest, OpenMpiVariablesFormOneJobOnThisHost) {
  const std::string port = std::to_string(freePort());
  auto r = startLikeALauncher(3, [&](int rank) {
    return "OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + " OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_LOCAL_RANK=" +
           std::to_string(rank) + " OMPI_COMM_WORLD_LOCAL_SIZE=3 MASTER_PORT=" + port;
  });
  expectOneTableOf(r, 3);
}

TEST(BenchLauncherTest, HydraVariablesFormOneJobOnThisHost) {
  const std::string port = std::to_string(freePort());
  auto r = startLikeALauncher(2, [&](int rank) {
    return "PMI_RANK=" + std::to_string(rank) + " PMI_SIZE=2 MPI_LOCALRANKID=" + std::to_string(rank) +
           " MPI_LOCALNRANKS=2 MASTER_PORT=" + port;
  });
  expectOneTableOf(r, 2);
}

TEST(BenchLauncherTest, MpiRanksOnSeveralHostsWithoutAnAddressAreAUsageError) {
  auto r = runCommand("env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u SLURM_JOB_NODELIST -u SLURM_STEP_NODELIST "
                      "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=8 OMPI_COMM_WORLD_LOCAL_SIZE=4 " +
                          dtrainBin() + " bench allreduce --backend gloo",
                      30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("OMPI_COMM_WORLD_SIZE=8 (Open MPI) may span hosts"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("set MASTER_ADDR"), std::string::npos) << r.output;
}

TEST(BenchLauncherTest, MalformedLauncherVariableIsNamed) {
  auto r = runCommand("env -u RANK -u WORLD_SIZE SLURM_PROCID=x SLURM_NTASKS=2 SLURM_JOB_NODELIST=localhost " +
                          dtrainBin() + " bench allreduce --backend gloo",
                      30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("SLURM_PROCID='x' is not an integer; expected 0..1"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dtrain::testing
