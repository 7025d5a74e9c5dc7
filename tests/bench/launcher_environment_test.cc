// Reading an srun / mpirun start (bench/launcher_environment.h) from a fake
// environment; the real-process starts are in tests/cli/bench_launcher_test.cc.
#include <gtest/gtest.h>

#include <map>

#include "bench/launcher_environment.h"
#include "common/error.h"

namespace dtrain::bench {
namespace {

std::optional<LauncherJob> jobOf(const std::map<std::string, std::string>& env) {
  return launcherJob([&](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

TEST(LauncherEnvironmentTest, TorchrunVariablesOrNoLauncherLeaveTheEnvironmentAlone) {
  EXPECT_FALSE(jobOf({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}));
  EXPECT_FALSE(jobOf({{"HOME", "/root"}}));
}

TEST(LauncherEnvironmentTest, SlurmRendezvousAtTheFirstNodeOnAPortFromTheJobId) {
  auto job = jobOf({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                    {"SLURM_JOB_ID", "123456"}, {"SLURM_JOB_NODELIST", "gpu[007-010],login"},
                    {"SLURM_STEP_NODELIST", "gpu[008-009]"}});
  ASSERT_TRUE(job);
  EXPECT_EQ(job->launcher, "Slurm");
  EXPECT_EQ(job->rank, 5);
  EXPECT_EQ(job->size, 8);
  EXPECT_EQ(job->local_rank, 1);
  EXPECT_EQ(job->master_addr, "gpu008");  // the step's node list wins over the job's
  EXPECT_EQ(job->master_port, 10000 + 123456 % 50000);
}

TEST(LauncherEnvironmentTest, MpiWinsOverTheSlurmAllocationItRunsIn) {
  auto job = jobOf({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_JOB_NODELIST", "n[1-2]"},
                    {"SLURM_JOB_ID", "7"}, {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  ASSERT_TRUE(job);
  EXPECT_EQ(job->launcher, "Open MPI");
  EXPECT_EQ(job->rank, 3);
  EXPECT_EQ(job->size, 4);
  EXPECT_EQ(job->local_rank, 1);
  EXPECT_EQ(job->local_size, 2);
  EXPECT_EQ(job->master_addr, "n1");
  EXPECT_EQ(job->master_port, 10007);
}

TEST(LauncherEnvironmentTest, MasterAddrAndPortOverride) {
  auto job = jobOf({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.5"}, {"MASTER_PORT", "4242"},
                    {"SLURM_JOB_NODELIST", "n1"}, {"SLURM_JOB_ID", "7"}});
  ASSERT_TRUE(job);
  EXPECT_EQ(job->launcher, "MPICH/Hydra");
  EXPECT_EQ(job->master_addr, "10.0.0.5");
  EXPECT_EQ(job->master_port, 4242);
}

TEST(LauncherEnvironmentTest, AllRanksOnThisHostUseLoopbackAndTorchrunsPort) {
  auto job = jobOf({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  ASSERT_TRUE(job);
  EXPECT_EQ(job->master_addr, "127.0.0.1");
  EXPECT_EQ(job->master_port, 29500);
}

void expectConfigError(const std::map<std::string, std::string>& env, const std::string& expected) {
  try {
    jobOf(env);
    ADD_FAILURE() << "no error; expected: " << expected;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(LauncherEnvironmentTest, BadValuesAreNamed) {
  expectConfigError({{"PMI_RANK", "0"}, {"PMI_SIZE", "4"}, {"MPI_LOCALNRANKS", "2"}},
                    "PMI_SIZE=4 (MPICH/Hydra) may span hosts and no node list names rank 0's host; set MASTER_ADDR");
  expectConfigError({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n1"}},
                    "SLURM_PROCID=2 is out of range; expected 0..1");
  expectConfigError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[1-"}},
                    "SLURM_JOB_NODELIST: ");
  expectConfigError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n1"},
                     {"MASTER_PORT", "70000"}},
                    "MASTER_PORT=70000 is out of range; expected 1..65535");
}

}  // namespace
}  // namespace dtrain::bench
