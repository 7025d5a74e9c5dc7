// deploy/slurm/healthcheck.sh with a fake `dtrain doctor` (passes, fails,
// crashes, hangs, prints no JSON) and a fake scontrol that records its calls:
// which nodes it drains, with what reason, and which it resumes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/command.h"
#include "fixture_tree.h"
#include "tests/support/temp_dir.h"

namespace dtrain::testing {
namespace {

namespace fs = std::filesystem;

class SlurmHealthcheckTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = makeTempDir("dtrain-healthcheck-test"); }
  void TearDown() override { removeTree(dir_); }

  // Runs the health check for node n1 with `env` (VAR=value ...) added;
  // runCommand wraps the line in single quotes, so values quote with \".
  CommandResult run(const std::string& env) {
    const std::string slurm = sourceDir() + "/tests/doctor/slurm";
    return runCommand("env -u DTRAIN_DOCTOR_ARGS DTRAIN=" + slurm + "/fake_dtrain.sh SCONTROL=" + slurm +
                          "/fake_scontrol.sh FAKE_SCONTROL_LOG=" + log() + " FAKE_DOCTOR_ARGS_FILE=" + dir_ +
                          "/doctor_args DTRAIN_HEALTHCHECK_NODE=n1 DTRAIN_HEALTHCHECK_CONFIG=" + dir_ +
                          "/config " + env + " " + sourceDir() + "/deploy/slurm/healthcheck.sh",
                      60);
  }
  std::string log() const { return dir_ + "/scontrol.log"; }
  std::string read(const std::string& name) const {
    std::ifstream in(dir_ + "/" + name);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // The scontrol update calls, one per line.
  std::string updates() const {
    std::istringstream lines(read("scontrol.log"));
    std::string out;
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("[update]", 0) == 0) out += line + "\n";
    }
    return out;
  }

  std::string dir_;
};

TEST_F(SlurmHealthcheckTest, FailedChecksDrainTheNodeNamingThem) {
  auto r = run("FAKE_DOCTOR=fail");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(updates(), "[update][NodeName=n1][State=DRAIN][Reason=dtrain doctor: gpu.count,rdma.ports]\n")
      << read("scontrol.log") << r.output;
  EXPECT_EQ(read("doctor_args"), "doctor --json\n");
}

TEST_F(SlurmHealthcheckTest, ACrashDrainsSayingSo) {
  auto r = run("FAKE_DOCTOR=crash");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(updates(), "[update][NodeName=n1][State=DRAIN][Reason=dtrain doctor: crashed (signal 11)]\n")
      << r.output;
}

TEST_F(SlurmHealthcheckTest, OutputThatIsNotJsonDrainsSayingSo) {
  auto r = run("FAKE_DOCTOR=garbage");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(updates().rfind("[update][NodeName=n1][State=DRAIN][Reason=dtrain doctor: printed no valid JSON report "
                            "(exit 0): Expecting value",
                            0),
            0u)
      << updates() << r.output;
}

TEST_F(SlurmHealthcheckTest, BadInputToTheDoctorDrainsWithItsError) {
  auto r = run("FAKE_DOCTOR=usage");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(updates(),
            "[update][NodeName=n1][State=DRAIN][Reason=dtrain doctor: printed no valid JSON report (exit 2): "
            "dtrain: error: --checks 'gpu.bogus': unknown check (expected one of gpu.count, ...)]\n")
      << r.output;
}

TEST_F(SlurmHealthcheckTest, AHungDoctorIsStoppedAndDrains) {
  auto start = std::chrono::steady_clock::now();
  auto r = run("FAKE_DOCTOR=hang DTRAIN_DOCTOR_TIMEOUT=1");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(updates(), "[update][NodeName=n1][State=DRAIN][Reason=dtrain doctor: timed out after 1s]\n") << r.output;
}

TEST_F(SlurmHealthcheckTest, AMissingBinaryDrains) {
  auto r = run("DTRAIN=/nonexistent/dtrain");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(updates(), "[update][NodeName=n1][State=DRAIN][Reason=dtrain doctor: cannot run /nonexistent/dtrain "
                       "(exit 127)]\n")
      << r.output;
}

TEST_F(SlurmHealthcheckTest, AHealthyNodeIsLeftAlone) {
  for (const char* mode : {"pass", "warn"}) {
    auto r = run(std::string("FAKE_DOCTOR=") + mode + " FAKE_NODE_STATE=IDLE");
    EXPECT_EQ(r.exit_code, 0) << mode << ": " << r.output;
  }
  EXPECT_EQ(updates(), "") << read("scontrol.log");
  EXPECT_NE(read("scontrol.log").find("[show][node][n1]"), std::string::npos) << read("scontrol.log");
}

TEST_F(SlurmHealthcheckTest, ANodeItDrainedIsResumedWhenHealthy) {
  auto r = run("FAKE_DOCTOR=warn FAKE_NODE_STATE=IDLE+DRAIN \"FAKE_NODE_REASON=dtrain doctor: gpu.count\"");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(updates(), "[update][NodeName=n1][State=RESUME]\n") << r.output;
}

TEST_F(SlurmHealthcheckTest, ANodeDrainedBySomeoneElseStaysAsItIs) {
  auto healthy = run("FAKE_DOCTOR=pass FAKE_NODE_STATE=IDLE+DRAIN \"FAKE_NODE_REASON=replacing a DIMM\"");
  EXPECT_EQ(healthy.exit_code, 0) << healthy.output;
  auto failing = run("FAKE_DOCTOR=fail FAKE_NODE_STATE=IDLE+DRAIN \"FAKE_NODE_REASON=replacing a DIMM\"");
  EXPECT_EQ(failing.exit_code, 1) << failing.output;
  EXPECT_NE(failing.output.find("already drained by someone else (Reason=replacing a DIMM"), std::string::npos)
      << failing.output;
  EXPECT_EQ(updates(), "") << read("scontrol.log");
}

TEST_F(SlurmHealthcheckTest, ANewFailureReplacesItsOwnOlderReason) {
  auto r = run("FAKE_DOCTOR=fail FAKE_NODE_STATE=IDLE+DRAIN \"FAKE_NODE_REASON=dtrain doctor: host.memlock\"");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(updates(), "[update][NodeName=n1][State=DRAIN][Reason=dtrain doctor: gpu.count,rdma.ports]\n");
}

TEST_F(SlurmHealthcheckTest, ArgumentsComeFromTheEnvironmentOrTheConfigFile) {
  auto from_env = run("FAKE_DOCTOR=pass \"DTRAIN_DOCTOR_ARGS=--expect-gpus 8 --strict\"");
  EXPECT_EQ(from_env.exit_code, 0) << from_env.output;
  EXPECT_EQ(read("doctor_args"), "doctor --json --expect-gpus 8 --strict\n");
  std::ofstream(dir_ + "/config") << "DTRAIN_DOCTOR_ARGS=\"--expect-gpus 4\"\n";
  auto from_file = run("FAKE_DOCTOR=pass");
  EXPECT_EQ(from_file.exit_code, 0) << from_file.output;
  EXPECT_EQ(read("doctor_args"), "doctor --json --expect-gpus 4\n");
}

TEST_F(SlurmHealthcheckTest, BadSettingsExitTwoWithoutTouchingTheNode) {
  auto r = run("FAKE_DOCTOR=fail DTRAIN_DOCTOR_TIMEOUT=soon");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("DTRAIN_DOCTOR_TIMEOUT='soon': expected a whole number of seconds > 0"), std::string::npos)
      << r.output;
  EXPECT_EQ(read("scontrol.log"), "");
}

TEST_F(SlurmHealthcheckTest, AnUnreachableControllerStillGetsTheDrainRequest) {
  auto r = run("FAKE_DOCTOR=fail FAKE_SCONTROL_FAIL=1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("failed"), std::string::npos) << r.output;
  EXPECT_EQ(updates(), "[update][NodeName=n1][State=DRAIN][Reason=dtrain doctor: gpu.count,rdma.ports]\n");
}

// The real `dtrain doctor` (not the fake) on fixture trees: its JSON report is
// what the health check parses.
TEST_F(SlurmHealthcheckTest, TheRealDoctorsFailuresDrainAndItsPassResumes) {
  FixtureTree node;
  node.writeGoodNode();
  node.remove("/sys/class/infiniband/mlx5_0/ports/1");
  node.writeRdmaPort("mlx5_0", 1, "1: DOWN", "3: Disabled");
  node.write("/proc/mounts", "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,size=65536k 0 0\n");
  const std::string doctor = "DTRAIN=" + dtrainBin() + " DTRAIN_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 "
                             "\"DTRAIN_DOCTOR_ARGS=--root " + node.root() + " --check rdma,host\" ";
  auto failing = run(doctor + "FAKE_NODE_STATE=IDLE");
  EXPECT_EQ(failing.exit_code, 1) << failing.output;
  EXPECT_EQ(updates(), "[update][NodeName=n1][State=DRAIN][Reason=dtrain doctor: rdma.ports,host.shm]\n")
      << read("scontrol.log") << failing.output;

  FixtureTree healthy;
  healthy.writeGoodNode();
  const std::string good = "DTRAIN=" + dtrainBin() + " DTRAIN_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 "
                           "\"DTRAIN_DOCTOR_ARGS=--root " + healthy.root() + " --check rdma,host\" ";
  auto passing = run(good + "FAKE_NODE_STATE=IDLE+DRAIN \"FAKE_NODE_REASON=dtrain doctor: rdma.ports,host.shm\"");
  EXPECT_EQ(passing.exit_code, 0) << passing.output;
  EXPECT_EQ(updates(),
            "[update][NodeName=n1][State=DRAIN][Reason=dtrain doctor: rdma.ports,host.shm]\n"
            "[update][NodeName=n1][State=RESUME]\n")
      << read("scontrol.log") << passing.output;
}

}  // namespace
}  // namespace dtrain::testing
