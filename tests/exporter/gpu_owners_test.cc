// Which job owns a GPU (exporter/gpu_owners.h): cgroup paths of Slurm and
// Kubernetes as they appear in /proc/<pid>/cgroup, a fixture /proc through
// SystemRoot, and end to end: `dtrain exporter --once --root FIXTURE` with
// the fake NVML's processes (FAKE_NVML_SCENARIO=owners).
#include "exporter/gpu_owners.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <set>

#include "common/error.h"
#include "exporter/gpu_monitor.h"
#include "exposition.h"
#include "fake_nvml_values.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

namespace dtrain::exporter {
namespace {

namespace fake = testing::fake_nvml;
using testing::CommandResult;

constexpr const char* kPodUid = "0b7f2a9c-3d4e-4f5a-8b6c-7d8e9f0a1b2c";

std::optional<GpuOwner> owner(const std::string& hpc_job, const std::string& pod_uid) {
  return GpuOwner{hpc_job, pod_uid};
}

TEST(GpuOwnersTest, SlurmJobsAreFoundInCgroupV2AndV1Paths) {
  EXPECT_EQ(ownerFromCgroup("0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0\n"), owner("123", ""));
  // A node running several slurmd: the scope carries the node's name.
  EXPECT_EQ(ownerFromCgroup("0::/system.slice/node7_slurmstepd.scope/job_77/step_batch/user/task_0\n"),
            owner("77", ""));
  EXPECT_EQ(ownerFromCgroup("12:pids:/user.slice\n"
                            "11:memory:/slurm/uid_1000/job_4242/step_1/task_0\n"
                            "10:devices:/slurm/uid_1000/job_4242/step_1\n"),
            owner("4242", ""));
}

TEST(GpuOwnersTest, KubernetesPodsAreFoundWithEitherCgroupDriver) {
  std::string underscored = kPodUid;
  std::replace(underscored.begin(), underscored.end(), '-', '_');
  EXPECT_EQ(ownerFromCgroup("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + underscored +
                            ".slice/cri-containerd-4f1c2b.scope\n"),
            owner("", kPodUid));
  EXPECT_EQ(ownerFromCgroup("0::/kubepods.slice/kubepods-pod" + underscored + ".slice/crio-9a8b.scope\n"),
            owner("", kPodUid));
  EXPECT_EQ(ownerFromCgroup(std::string("4:memory:/kubepods/besteffort/pod") + kPodUid + "/0123abcd\n"),
            owner("", kPodUid));
}

TEST(GpuOwnersTest, OtherProcessesHaveNoOwner) {
  for (const char* text : {"0::/user.slice/user-1000.slice/session-3.scope\n",
                           "0::/system.slice/docker-4f1c2b9d.scope\n",
                           "0::/system.slice/slurmstepd.scope/job_abc/step_0\n",  // not a job id
                           "0::/job_123/step_0\n",                                 // no slurm in the path
                           "0::/kubepods.slice/kubepods-burstable.slice\n",        // no pod
                           "", "garbage without colons\n"}) {
    EXPECT_EQ(ownerFromCgroup(text), std::nullopt) << text;
  }
}

// A fixture /proc/<pid>/cgroup under `root`.
void writeCgroup(const std::string& root, unsigned pid, const std::string& text) {
  std::string dir = root + "/proc/" + std::to_string(pid);
  ::mkdir((root + "/proc").c_str(), 0755);
  ::mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/cgroup") << text;
}

TEST(GpuOwnersTest, OwnersOfProcessesAreDistinctSortedAndSkipVanishedPids) {
  testing::TempDir root("gpu-owners");
  writeCgroup(root.path(), 10, "0::/system.slice/slurmstepd.scope/job_9/step_0/user/task_0\n");
  writeCgroup(root.path(), 11, "0::/system.slice/slurmstepd.scope/job_9/step_1/user/task_0\n");
  writeCgroup(root.path(), 12, "0::/system.slice/slurmstepd.scope/job_10/step_0/user/task_0\n");
  writeCgroup(root.path(), 13, "0::/user.slice/user-0.slice/session-1.scope\n");
  SystemRoot system(root.path());
  std::vector<gpu::NvmlProcess> processes = {{12, {}}, {10, {}}, {11, {}}, {13, {}}, {99, {}}};
  EXPECT_EQ(ownersOf(system, processes), (std::vector<GpuOwner>{{"10", ""}, {"9", ""}}));
  EXPECT_TRUE(ownersOf(system, {}).empty());
}

// The fake's processes in the "owners" scenario: GPU 0 runs two steps of
// Slurm job 123 (cgroup v2 and v1); GPU 1 a pod, a process of Slurm job 456
// and one whose /proc entry is gone.
void writeOwnerFixture(const std::string& root) {
  writeCgroup(root, fake::kOwnerPids0[0], "0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0\n");
  writeCgroup(root, fake::kOwnerPids0[1], "7:devices:/slurm/uid_1000/job_123/step_1/task_0\n");
  writeCgroup(root, fake::kOwnerPids1[0], std::string("0::/kubepods/burstable/pod") + kPodUid + "/4f1c2b\n");
  writeCgroup(root, fake::kOwnerPids1[1], "0::/system.slice/slurmstepd.scope/job_456/step_0/user/task_0\n");
}

CommandResult exporterOnce(const std::string& root, const std::string& scenario) {
  return testing::runCommand("env -u SLURM_JOB_ID -u NODE_NAME DTRAIN_NVML_LIBRARY=" DTRAIN_FAKE_NVML
                             " FAKE_NVML_SCENARIO=" + scenario + " " + testing::dtrainBin() +
                             " exporter --once --root " + root + " 2>/dev/null");
}

TEST(ExporterOwnersTest, EachGpuSeriesCarriesTheJobsAndPodsOfItsProcesses) {
  testing::TempDir root("exporter-owners");
  writeOwnerFixture(root.path());
  CommandResult r = exporterOnce(root.path(), "owners");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto samples = testing::parseExposition(r.output);
  auto owners = [&](const std::string& metric, const std::string& gpu) {
    std::set<std::pair<std::string, std::string>> seen;
    for (const auto& s : testing::samplesOf(samples, metric, {{"gpu", gpu}})) {
      auto job = s.labels.find("hpc_job");
      auto pod = s.labels.find("pod_uid");
      seen.emplace(job == s.labels.end() ? "" : job->second, pod == s.labels.end() ? "" : pod->second);
    }
    return seen;
  };
  using Seen = std::set<std::pair<std::string, std::string>>;
  for (const char* metric : {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_SM_ACTIVE"}) {
    SCOPED_TRACE(metric);
    EXPECT_EQ(owners(metric, "0"), (Seen{{"123", ""}})) << r.output;
  }
  // Two owners on GPU 1: one series each, as dcgm-exporter's HPC job mapping does.
  EXPECT_EQ(owners("DCGM_FI_DEV_GPU_UTIL", "1"), (Seen{{"456", ""}, {"", kPodUid}})) << r.output;
  for (const auto& s : testing::samplesOf(samples, "DCGM_FI_DEV_GPU_UTIL", {{"gpu", "1"}})) {
    EXPECT_EQ(s.value, fake::kGpuUtil[1]);
  }
}

TEST(ExporterOwnersTest, WithoutProcessesThereAreNoOwnerLabels) {
  testing::TempDir root("exporter-owners");
  writeOwnerFixture(root.path());
  CommandResult r = exporterOnce(root.path(), "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto samples = testing::parseExposition(r.output);
  ASSERT_FALSE(samples.empty());
  for (const auto& s : samples) {
    EXPECT_EQ(s.labels.count("hpc_job"), 0u) << s.name;
    EXPECT_EQ(s.labels.count("pod_uid"), 0u) << s.name;
  }
  EXPECT_EQ(testing::samplesOf(samples, "DCGM_FI_DEV_GPU_UTIL").size(), 2u);
}

TEST(ExporterOwnersTest, ARootThatIsNotADirectoryIsAUsageError) {
  CommandResult r = testing::runCommand("DTRAIN_NVML_LIBRARY=" DTRAIN_FAKE_NVML " " + testing::dtrainBin() +
                                        " exporter --once --root /nonexistent/fixture");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--root '/nonexistent/fixture': no such directory; expected an existing directory"),
            std::string::npos)
      << r.output;
}

TEST(ExporterOwnersTest, AMonitorWithAMissingRootIsRefusedNamingIt) {
  MonitorOptions options;
  options.system_root = "/nonexistent/fixture";
  try {
    GpuMonitor monitor(options);
    FAIL() << "a missing root was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("/nonexistent/fixture"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace dtrain::exporter
