// The GPU checks of `dtrain doctor` (doctor/gpu_checks.h) as functions: a
// DoctorContext over a fixture root, an environment map, and NVML opened from
// the fake library (tests/gpu/fake_nvml.cc) in one of its scenarios.
#include "doctor/gpu_allreduce.h"
#include "doctor/gpu_checks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/process.h"
#include "common/settings.h"
#include "fake_nvml_library.h"
#include "fake_nvml_values.h"
#include "gpu/nvml.h"
#include "tests/support/temp_dir.h"

namespace dtrain::doctor {
namespace {

namespace fake = dtrain::testing::fake_nvml;
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using dtrain::testing::useNvmlLibrary;

void writeFile(const fs::path& path, const std::string& text, bool executable = false) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
  if (executable) ::chmod(path.c_str(), 0755);
}

const std::vector<std::string> kCheckNames = {
    "gpu.driver",   "gpu.cuda",     "gpu.nccl",     "gpu.count",      "gpu.persistence", "gpu.memory_health",
    "gpu.clocks",   "gpu.pcie",     "gpu.topology", "gpu.fabric",     "gpu.processes",   "gpu.allreduce",
    "gpu.sendrecv"};

class GpuChecksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::makeTempDir("dtrain-doctor-gpu");
    fs::create_directories(dir_ / "root");
    useNvmlLibrary(DTRAIN_FAKE_NVML);
    ::unsetenv("FAKE_NVML_SCENARIO");
    ::unsetenv("FAKE_NVML_INIT_ERROR");
    env_["PATH"] = ::getenv("PATH") != nullptr ? ::getenv("PATH") : "/usr/bin:/bin";
    env_["DTRAIN_CUDART_LIBRARY"] = DTRAIN_FAKE_CUDART_12_8;
    env_["DTRAIN_NCCL_LIBRARY"] = DTRAIN_FAKE_NCCL;
    addGpuChecks(checks_);
  }
  void TearDown() override {
    ::unsetenv("FAKE_NVML_SCENARIO");
    ::unsetenv("FAKE_NVML_INIT_ERROR");
    useNvmlLibrary(DTRAIN_FAKE_NVML);
    fs::remove_all(dir_);
  }

  fs::path root() const { return dir_ / "root"; }
  void withDriverFile() {
    writeFile(root() / "proc/driver/nvidia/version",
              "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n");
  }

  // Runs one check with NVML from the fake library in `scenario`
  // (nullptr: NVML absent, as when the library cannot be opened).
  CheckResult run(const std::string& name, const char* scenario = "healthy") {
    if (scenario != nullptr) ::setenv("FAKE_NVML_SCENARIO", scenario, 1);
    std::unique_ptr<gpu::Nvml> nvml;
    std::string nvml_error;
    try {
      nvml = gpu::Nvml::open();
    } catch (const IoError& e) {
      nvml_error = e.message();
    }
    SystemRoot system_root(root().string());
    DoctorContext ctx{system_root, env_, options_, nvml.get(), nvml_error};
    for (const CheckSpec& spec : checks_) {
      if (spec.name == name) {
        CheckResult result = spec.run(ctx);
        EXPECT_EQ(result.name, name);
        if (result.status != Status::kPass && result.status != Status::kSkip) {
          EXPECT_FALSE(result.hint.empty()) << name << " gave no hint for: " << result.reason;
        }
        return result;
      }
    }
    ADD_FAILURE() << "no check " << name;
    return {};
  }
  CheckResult runWithoutNvml(const std::string& name) {
    useNvmlLibrary((dir_ / "no-such-libnvidia-ml.so.1").string());
    CheckResult result = run(name, nullptr);
    useNvmlLibrary(DTRAIN_FAKE_NVML);
    return result;
  }

  fs::path dir_;
  std::map<std::string, std::string> env_;
  DoctorOptions options_;
  std::vector<CheckSpec> checks_;
};

TEST_F(GpuChecksTest, ChecksAreListedInTableOrderAndOnlyTheAllreduceIsActive) {
  std::vector<std::string> names;
  for (const CheckSpec& spec : checks_) {
    names.push_back(spec.name);
    EXPECT_FALSE(spec.description.empty()) << spec.name;
    EXPECT_EQ(spec.active, spec.name == "gpu.allreduce" || spec.name == "gpu.sendrecv") << spec.name;
  }
  EXPECT_EQ(names, kCheckNames);
}

// What one check must say of the fake NVML's node in one scenario.
struct Expected {
  const char* check;
  Status status;
  std::string reason;  // the whole reason
  std::vector<std::string> in_hint = {};
  std::vector<std::string> in_detail = {};
};

void expectReport(const CheckResult& r, const Expected& e) {
  SCOPED_TRACE(e.check);
  EXPECT_EQ(r.status, e.status) << r.reason;
  EXPECT_EQ(r.reason, e.reason);
  if (e.status == Status::kPass) EXPECT_TRUE(r.hint.empty()) << r.hint;
  for (const std::string& part : e.in_hint) EXPECT_THAT(r.hint, HasSubstr(part));
  for (const std::string& part : e.in_detail) EXPECT_THAT(r.detail, HasSubstr(part));
}

TEST_F(GpuChecksTest, HealthyNodePassesEveryCheckWithTheValuesFound) {
  withDriverFile();
  options_.expect_gpus = 2;
  const Expected healthy[] = {
      {"gpu.driver", Status::kPass, "driver 580.95.05, NVML 12.580.95.05"},
      {"gpu.cuda", Status::kPass,
       std::string("driver supports CUDA 13.0, runtime CUDA 12.8 (") + DTRAIN_FAKE_CUDART_12_8 + ")"},
      {"gpu.nccl", Status::kPass, std::string("NCCL 2.28.9 (") + DTRAIN_FAKE_NCCL + ")"},
      {"gpu.count", Status::kPass, "2 GPUs: NVIDIA H100 80GB HBM3 x2 (expected 2, --expect-gpus)", {},
       {std::string("GPU1 NVIDIA H100 80GB HBM3 ") + fake::kPciBusId[1]}},
      {"gpu.persistence", Status::kPass, "persistence mode enabled on 2 GPUs"},
      {"gpu.memory_health", Status::kPass, "no uncorrected ECC errors, no pending or failed row remaps on 2 GPUs"},
      {"gpu.clocks", Status::kPass, "no throttling on 2 idle GPUs"},
      {"gpu.pcie", Status::kPass, "links at full width on 2 GPUs", {},
       {"GPU0 Gen5 x16 (max Gen5 x16)\nGPU1 Gen5 x16 (max Gen5 x16)\n"}},
      {"gpu.topology", Status::kPass, "2 GPUs, all pairs NVLink (NV4), P2P ok", {},
       {"        GPU0    GPU1\n"
        "GPU0    X       NV4\n"
        "GPU1    NV4     X\n",
        "P2P GPU0-GPU1: read ok nvlink ok"}},
      {"gpu.processes", Status::kPass, "no compute processes on 2 GPUs"},
      {"gpu.fabric", Status::kSkip, "no NVSwitch fabric"},
  };
  for (const Expected& e : healthy) expectReport(run(e.check), e);
}

TEST_F(GpuChecksTest, DegradedNodeHitsEachWarningAndFailure) {
  withDriverFile();
  writeFile(root() / "proc" / std::to_string(fake::kForeignPid) / "comm", "python3\n");
  const Expected degraded[] = {
      {"gpu.persistence", Status::kWarn, "persistence mode disabled on GPU1 (of 2 GPUs)", {"nvidia-smi -pm 1"}},
      {"gpu.memory_health", Status::kWarn, "GPU1 row remap pending", {"reset the GPU"}},
      {"gpu.clocks", Status::kFail, "GPU0 HW slowdown while idle", {},
       {"GPU0 idle, clock event reasons 0x9 (HW slowdown)", "GPU1 idle, clock event reasons 0x5 (SW power cap)"}},
      {"gpu.pcie", Status::kFail, "GPU1 at x8 of x16", {},
       {"GPU0 Gen1 x16 (max Gen5 x16), idle: a lower generation at idle is normal", "GPU1 Gen5 x8 (max Gen5 x16)"}},
      {"gpu.topology", Status::kWarn,
       "2 GPUs, all pairs NVLink (NV3/NV4): GPU0 NVLink 3 inactive; GPU0-GPU1 P2P read not supported; "
       "GPU0-GPU1 P2P nvlink not supported",
       {"nvidia-smi nvlink -s", "ACS"},
       {"GPU0    X       NV3\nGPU1    NV4     X\n"}},
      {"gpu.fabric", Status::kFail,
       "GPU0 fabric registration in progress; GPU1 fabric registration in progress", {"nvidia-fabricmanager"}},
      {"gpu.processes", Status::kWarn, "1 process already on the GPUs: pid 4242 (python3) on GPU1 using 1536 MiB"},
  };
  for (const Expected& e : degraded) expectReport(run(e.check, "degraded"), e);
  // The rest of the degraded node is fine.
  for (const char* name : {"gpu.driver", "gpu.cuda", "gpu.nccl", "gpu.count"}) {
    EXPECT_EQ(run(name, "degraded").status, Status::kPass) << name;
  }
}

TEST_F(GpuChecksTest, ProcessOutsideTheRootShowsAQuestionMark) {
  CheckResult processes = run("gpu.processes", "degraded");
  EXPECT_EQ(processes.status, Status::kWarn);
  EXPECT_THAT(processes.reason, HasSubstr("pid 4242 (?) on GPU1"));
}

TEST_F(GpuChecksTest, MemoryHealthFailsOnUncorrectedEccAndOnFailedRemap) {
  // The exporter's readings: GPU 1 has 2 uncorrected ECC errors and a pending remap.
  CheckResult ecc = run("gpu.memory_health", "");
  EXPECT_EQ(ecc.status, Status::kFail);
  EXPECT_EQ(ecc.reason, "GPU1 2 uncorrected ECC errors (volatile)");
  EXPECT_THAT(ecc.detail, HasSubstr("GPU1 remapped rows: 0 correctable, 1 uncorrectable, remap pending;"));
  EXPECT_THAT(ecc.detail, HasSubstr("uncorrected ECC errors since driver load: 2\n"));

  CheckResult remap = run("gpu.memory_health", "healthy,remap_failure");
  EXPECT_EQ(remap.status, Status::kFail);
  EXPECT_EQ(remap.reason, "GPU0 row remapping failed");
  EXPECT_THAT(remap.hint, HasSubstr("replace the GPU"));
}

TEST_F(GpuChecksTest, PowerCapAtIdleWarns) {
  CheckResult clocks = run("gpu.clocks", "healthy,power_cap");
  EXPECT_EQ(clocks.status, Status::kWarn);
  EXPECT_EQ(clocks.reason, "GPU0 SW power cap while idle; GPU1 SW power cap while idle");
}

TEST_F(GpuChecksTest, BusyGpusAreNotJudgedForThrottlingButALowGenerationUnderLoadWarns) {
  CheckResult clocks = run("gpu.clocks", "busy");
  EXPECT_EQ(clocks.status, Status::kSkip);
  EXPECT_EQ(clocks.reason, "every GPU is busy: throttle reasons are judged at idle");
  EXPECT_THAT(clocks.detail, HasSubstr("GPU0 busy (95%): not judged"));

  CheckResult pcie = run("gpu.pcie", "busy");
  EXPECT_EQ(pcie.status, Status::kWarn);
  EXPECT_EQ(pcie.reason, "GPU0 at Gen3 of Gen5 while busy (95%); GPU1 at Gen3 of Gen5 while busy (95%)");
  EXPECT_THAT(pcie.hint, HasSubstr("BIOS"));

  // The exporter's readings: GPU0 at 87%, GPU1 at 12%, both busy.
  EXPECT_EQ(run("gpu.clocks", "").status, Status::kSkip);
}

TEST_F(GpuChecksTest, NvSwitchSystemShowsEveryLinkOnEveryPairAndARegisteredFabric) {
  CheckResult topo = run("gpu.topology", "healthy,nvswitch");
  EXPECT_EQ(topo.status, Status::kPass);
  EXPECT_EQ(topo.reason, "2 GPUs, all pairs NVLink (NV18), P2P ok");
  EXPECT_THAT(topo.detail, HasSubstr("GPU0    X       NV18\n"));

  CheckResult fabric = run("gpu.fabric", "healthy,nvswitch");
  EXPECT_EQ(fabric.status, Status::kPass);
  EXPECT_EQ(fabric.reason, "2 GPUs registered with the fabric (clique 7)");
  EXPECT_THAT(fabric.detail, HasSubstr("GPU1 registered, clique 7, cluster a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"));
}

TEST_F(GpuChecksTest, FabricRegistrationErrorFails) {
  CheckResult fabric = run("gpu.fabric", "healthy,fabric_error");
  EXPECT_EQ(fabric.status, Status::kFail);
  EXPECT_THAT(fabric.reason, HasSubstr("GPU0 fabric registration failed: NVML error 999 (Unknown Error)"));
}

TEST_F(GpuChecksTest, PcieOnlyTopologyShowsTheCommonAncestor) {
  CheckResult topo = run("gpu.topology", "healthy,no_nvlink");
  EXPECT_EQ(topo.status, Status::kPass);
  EXPECT_EQ(topo.reason, "2 GPUs, no NVLink (NODE), P2P ok");
  EXPECT_THAT(topo.detail, HasSubstr("GPU0    X       NODE\n"));
  EXPECT_THAT(topo.detail, HasSubstr("P2P GPU0-GPU1: read ok\n"));
}

TEST_F(GpuChecksTest, NvmlAbsentWithoutDriverOrExpectedGpusSkipsEveryCheck) {
  env_.erase("DTRAIN_NCCL_LIBRARY");
  env_["DTRAIN_NCCL_LIBRARY"] = (dir_ / "no-libnccl.so.2").string();
  CheckResult driver = runWithoutNvml("gpu.driver");
  EXPECT_EQ(driver.status, Status::kSkip);
  EXPECT_EQ(driver.reason, "no NVIDIA driver on this node");
  for (const std::string& name : kCheckNames) {
    if (name == "gpu.driver") continue;
    CheckResult r = runWithoutNvml(name);
    EXPECT_EQ(r.status, Status::kSkip) << name << ": " << r.reason;
    if (name != "gpu.nccl") {
      EXPECT_EQ(r.reason, "NVML not available") << name;
    }
  }
  options_.expect_gpus = 0;
  EXPECT_EQ(runWithoutNvml("gpu.driver").status, Status::kSkip);
  EXPECT_EQ(runWithoutNvml("gpu.count").status, Status::kSkip);
}

TEST_F(GpuChecksTest, NvmlAbsentWithTheDriverLoadedFailsWithNvmlsError) {
  withDriverFile();
  ::setenv("FAKE_NVML_INIT_ERROR", "9", 1);  // NVML_ERROR_DRIVER_NOT_LOADED
  CheckResult driver = run("gpu.driver", "healthy");
  EXPECT_EQ(driver.status, Status::kFail);
  EXPECT_THAT(driver.reason, HasSubstr("NVML not available"));
  EXPECT_THAT(driver.reason, HasSubstr("NVML error 9 (Driver Not Loaded)"));
  EXPECT_THAT(driver.hint, HasSubstr("580.95.05"));
  EXPECT_THAT(driver.hint, HasSubstr("libnvidia-ml.so.1"));
  EXPECT_EQ(run("gpu.pcie", "healthy").reason, "NVML not available");
}

TEST_F(GpuChecksTest, NvmlAbsentWhileGpusAreExpectedFailsDriverAndCount) {
  options_.expect_gpus = 8;
  CheckResult driver = runWithoutNvml("gpu.driver");
  EXPECT_EQ(driver.status, Status::kFail);
  EXPECT_THAT(driver.reason, HasSubstr("NVML not available: "));
  EXPECT_THAT(driver.reason, HasSubstr("no-such-libnvidia-ml.so.1"));
  EXPECT_THAT(driver.reason, HasSubstr("the kernel module is not loaded"));
  EXPECT_THAT(driver.hint, HasSubstr("modprobe nvidia"));
  CheckResult count = runWithoutNvml("gpu.count");
  EXPECT_EQ(count.status, Status::kFail);
  EXPECT_EQ(count.reason, "NVML not available, expected 8 GPUs (--expect-gpus)");

  options_.expect_gpus.reset();
  env_["SLURM_GPUS_ON_NODE"] = "4";
  EXPECT_EQ(runWithoutNvml("gpu.driver").status, Status::kFail);
  EXPECT_EQ(runWithoutNvml("gpu.count").reason, "NVML not available, expected 4 GPUs (SLURM_GPUS_ON_NODE)");
}

TEST_F(GpuChecksTest, CountMismatchFailsAndNamesCudaVisibleDevices) {
  options_.expect_gpus = 8;
  CheckResult count = run("gpu.count");
  EXPECT_EQ(count.status, Status::kFail);
  EXPECT_EQ(count.reason, "found 2 GPUs, expected 8 (--expect-gpus)");
  EXPECT_THAT(count.hint, HasSubstr("nvidia-smi -L"));

  env_["CUDA_VISIBLE_DEVICES"] = "0";
  options_.expect_gpus = 2;
  CheckResult visible = run("gpu.count");
  EXPECT_EQ(visible.status, Status::kPass);
  EXPECT_EQ(visible.reason,
            "2 GPUs: NVIDIA H100 80GB HBM3 x2 (expected 2, --expect-gpus); CUDA_VISIBLE_DEVICES=0 (NVML counts "
            "every GPU, CUDA only these)");

  EXPECT_EQ(run("gpu.count", "no_gpus").reason, "found 0 GPUs, expected 2 (--expect-gpus); CUDA_VISIBLE_DEVICES=0 "
                                                "(NVML counts every GPU, CUDA only these)");
}

TEST_F(GpuChecksTest, SlurmGresGivesTheExpectedCount) {
  struct Case {
    std::map<std::string, std::string> vars;
    Status status;
    std::string reason_part;
  };
  const std::vector<Case> cases = {
      {{{"SLURM_GPUS_ON_NODE", "2"}}, Status::kPass, "(expected 2, SLURM_GPUS_ON_NODE)"},
      {{{"SLURM_GPUS_ON_NODE", "2"}, {"SLURM_GPUS_PER_NODE", "8"}}, Status::kPass, "(expected 2, SLURM_GPUS_ON_NODE)"},
      {{{"SLURM_JOB_GPUS", "0,1,2"}}, Status::kFail, "found 2 GPUs, expected 3 (SLURM_JOB_GPUS)"},
      {{{"SLURM_STEP_GPUS", "0-1"}}, Status::kPass, "(expected 2, SLURM_STEP_GPUS)"},
      {{{"SLURM_GPUS_PER_NODE", "h100:4"}}, Status::kFail, "found 2 GPUs, expected 4 (SLURM_GPUS_PER_NODE)"},
      {{{"SLURM_GPUS_PER_NODE", "gpu:h100:1,a100:1"}}, Status::kPass, "(expected 2, SLURM_GPUS_PER_NODE)"},
      {{{"SLURM_GPUS_ON_NODE", "two"}}, Status::kFail, "SLURM_GPUS_ON_NODE='two' is not a GPU count"},
      {{{"SLURM_JOB_GPUS", "0,,1"}}, Status::kFail, "SLURM_JOB_GPUS='0,,1' is not a list of GPU ids"},
      {{{"SLURM_GPUS_PER_NODE", "h100:"}}, Status::kFail, "SLURM_GPUS_PER_NODE='h100:' is not a count"},
  };
  const auto base = env_;
  for (const Case& c : cases) {
    env_ = base;
    for (const auto& [k, v] : c.vars) env_[k] = v;
    CheckResult count = run("gpu.count");
    SCOPED_TRACE(c.reason_part);
    EXPECT_EQ(count.status, c.status) << count.reason;
    EXPECT_THAT(count.reason, HasSubstr(c.reason_part));
  }
  // --expect-gpus wins over Slurm.
  env_ = base;
  env_["SLURM_GPUS_ON_NODE"] = "8";
  options_.expect_gpus = 2;
  EXPECT_EQ(run("gpu.count").status, Status::kPass);
}

TEST_F(GpuChecksTest, CudaRuntimeAgainstTheDriversCudaVersion) {
  env_["DTRAIN_CUDART_LIBRARY"] = DTRAIN_FAKE_CUDART_13_1;
  CheckResult minor = run("gpu.cuda");
  EXPECT_EQ(minor.status, Status::kWarn);
  EXPECT_THAT(minor.reason, HasSubstr("driver supports CUDA 13.0, runtime CUDA 13.1"));
  EXPECT_THAT(minor.reason, HasSubstr("minor-version compatibility"));

  env_["DTRAIN_CUDART_LIBRARY"] = DTRAIN_FAKE_CUDART_14_0;
  CheckResult major = run("gpu.cuda");
  EXPECT_EQ(major.status, Status::kFail);
  EXPECT_THAT(major.reason, HasSubstr("runtime CUDA 14.0"));
  EXPECT_THAT(major.reason, HasSubstr("major version is newer than the driver's"));
  EXPECT_THAT(major.hint, HasSubstr("supports CUDA 14.0"));

  env_["DTRAIN_CUDART_LIBRARY"] = (dir_ / "libcudart.so.13").string();
  CheckResult none = run("gpu.cuda");
  EXPECT_EQ(none.status, Status::kPass);
  EXPECT_EQ(none.reason, "driver supports CUDA 13.0; no CUDA runtime found (libcudart)");
  EXPECT_THAT(none.detail, HasSubstr("libcudart.so.13"));

  env_["DTRAIN_CUDART_LIBRARY"] = DTRAIN_FAKE_NCCL;  // a library without cudaRuntimeGetVersion
  CheckResult wrong = run("gpu.cuda");
  EXPECT_EQ(wrong.status, Status::kWarn);
  EXPECT_THAT(wrong.reason, HasSubstr("has no cudaRuntimeGetVersion"));
}

TEST_F(GpuChecksTest, NcclMissingWarnsWhereThereAreGpus) {
  env_["DTRAIN_NCCL_LIBRARY"] = (dir_ / "libnccl.so.2").string();
  CheckResult missing = run("gpu.nccl");
  EXPECT_EQ(missing.status, Status::kWarn);
  EXPECT_EQ(missing.reason, "libnccl.so.2 not found: the NCCL backend cannot run");
  EXPECT_THAT(missing.detail, HasSubstr("dlopen: "));

  CheckResult no_gpus = run("gpu.nccl", "no_gpus");
  EXPECT_EQ(no_gpus.status, Status::kSkip);

  env_["DTRAIN_NCCL_LIBRARY"] = DTRAIN_FAKE_CUDART_12_8;  // a library without ncclGetVersion
  CheckResult wrong = run("gpu.nccl");
  EXPECT_EQ(wrong.status, Status::kWarn);
  EXPECT_THAT(wrong.reason, HasSubstr("has no ncclGetVersion"));
}

TEST_F(GpuChecksTest, NoGpusSkipsThePerGpuChecks) {
  for (const char* name : {"gpu.persistence", "gpu.memory_health", "gpu.clocks", "gpu.pcie", "gpu.topology",
                           "gpu.fabric", "gpu.processes", "gpu.allreduce", "gpu.sendrecv"}) {
    CheckResult r = run(name, "no_gpus");
    EXPECT_EQ(r.status, Status::kSkip) << name;
    EXPECT_EQ(r.reason, "no GPUs") << name;
  }
  EXPECT_EQ(run("gpu.count", "no_gpus").reason, "0 GPUs");
}

// The all-reduce runs `<dtrain> launch ... <dtrain> bench allreduce ...`:
// scripts stand in for dtrain.
class GpuAllreduceTest : public GpuChecksTest {
 protected:
  void useScript(const std::string& body) {
    fs::path script = dir_ / "dtrain";
    writeFile(script, "#!/bin/sh\n" + body, true);
    options_.dtrain_binary = script.string();
  }
  // `check` with `script` standing in for dtrain fails for `reason`, its
  // detail holding `detail`.
  void expectFailure(const std::string& check, const std::string& script, const std::string& reason,
                     const std::string& detail) {
    useScript(script);
    CheckResult r = run(check);
    EXPECT_EQ(r.status, Status::kFail) << check;
    EXPECT_EQ(r.reason, reason) << check;
    EXPECT_THAT(r.detail, HasSubstr(detail)) << check;
  }
};

TEST_F(GpuAllreduceTest, ReportsTheBusBandwidthOfTheBench) {
  const fs::path args = dir_ / "args";
  useScript("echo \"$@\" > " + args.string() + "\necho '{\"avg_busbw_gbps\": 350.5,'\n");
  CheckResult r = run("gpu.allreduce");
  EXPECT_EQ(r.status, Status::kPass) << r.reason << "\n" << r.detail;
  EXPECT_EQ(r.reason, "busbw 350.5 GB/s over 2 GPUs (256 MiB)");
  std::ifstream in(args);
  std::string line;
  std::getline(in, line);
  EXPECT_THAT(line, HasSubstr("launch --standalone --nproc-per-node 2 " + options_.dtrain_binary +
                              " bench allreduce --backend nccl -b 256M -e 256M"));

  env_["CUDA_VISIBLE_DEVICES"] = "1";
  EXPECT_EQ(run("gpu.allreduce").reason, "busbw 350.5 GB/s over 1 GPU (256 MiB)");
}

TEST_F(GpuAllreduceTest, NonZeroExitFailsWithTheLastOutputLines) {
  expectFailure("gpu.allreduce",
                "echo 'rank 0: ncclCommInitRank'\necho 'NCCL error: unhandled system error' >&2\nexit 1\n",
                "the all-reduce failed (exit code 1)", "rank 0: ncclCommInitRank\nNCCL error: unhandled system error");
}

TEST_F(GpuAllreduceTest, OutputWithoutBandwidthFails) {
  expectFailure("gpu.allreduce", "echo 'all done'\n", "no bus bandwidth in the output of the all-reduce", "all done");
}

TEST_F(GpuAllreduceTest, TimeoutKillsTheWholeProcessGroup) {
  const fs::path pid_file = dir_ / "sleeper.pid";
  useScript("sleep 60 &\necho $! > " + pid_file.string() + "\nwait\n");
  options_.timeout_seconds = 1;
  auto start = std::chrono::steady_clock::now();
  CheckResult r = run("gpu.allreduce");
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.status, Status::kFail);
  EXPECT_EQ(r.reason, "timed out after 1.0 s (2 GPUs)");
  EXPECT_LT(elapsed, 8.0);
  pid_t sleeper = 0;
  std::ifstream(pid_file) >> sleeper;
  ASSERT_GT(sleeper, 0);
  for (int i = 0; i < 100 && processAlive(sleeper); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(processAlive(sleeper)) << "the script's child " << sleeper << " survived the timeout";
}

TEST_F(GpuAllreduceTest, UnrunnableBinaryFails) {
  options_.dtrain_binary = (dir_ / "no-such-dtrain").string();
  CheckResult r = run("gpu.allreduce");
  EXPECT_EQ(r.status, Status::kFail);
  EXPECT_THAT(r.reason, HasSubstr("cannot run '" + options_.dtrain_binary + "'"));
  EXPECT_THAT(r.reason, HasSubstr("No such file or directory"));
}

TEST_F(GpuAllreduceTest, SkipsWithoutNvml) {
  useScript("exit 0\n");
  EXPECT_EQ(runWithoutNvml("gpu.allreduce").reason, "NVML not available");
}

// gpu.sendrecv runs `<dtrain> bench sendrecv` on each pair of GPUs with
// CUDA_VISIBLE_DEVICES set to the pair (the fake NVML has two GPUs).
TEST_F(GpuAllreduceTest, SendRecvNamesTheSlowestPairAndRunsEachPairOnItsGpus) {
  const fs::path seen = dir_ / "seen";
  useScript("echo \"$CUDA_VISIBLE_DEVICES $@\" >> " + seen.string() + "\necho '{\"avg_busbw_gbps\": 301.25,'\n");
  CheckResult r = run("gpu.sendrecv");
  EXPECT_EQ(r.status, Status::kPass) << r.reason << "\n" << r.detail;
  EXPECT_EQ(r.reason, "slowest pair GPU0-GPU1 busbw 301.2 GB/s, median 301.2 GB/s over 1 pair (64 MiB)");
  EXPECT_THAT(r.detail, HasSubstr("GPU0-GPU1: busbw 301.2 GB/s"));
  env_["CUDA_VISIBLE_DEVICES"] = "3,5";
  EXPECT_EQ(run("gpu.sendrecv").status, Status::kPass);
  std::ifstream in(seen);
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_THAT(first, HasSubstr("0,1 launch --standalone --nproc-per-node 2 " + options_.dtrain_binary +
                               " bench sendrecv --backend nccl -b 64M -e 64M"));
  EXPECT_THAT(second, HasSubstr("3,5 launch"));
  env_["CUDA_VISIBLE_DEVICES"] = "1";
  EXPECT_EQ(run("gpu.sendrecv").reason, "one GPU: no pairs");
}

TEST_F(GpuAllreduceTest, SendRecvPairThatFailsIsNamed) {
  expectFailure("gpu.sendrecv", "echo 'NCCL WARN peer access' >&2\nexit 3\n",
                "GPU0-GPU1: the send/recv failed (exit code 3)", "NCCL WARN peer access");
  EXPECT_THAT(run("gpu.sendrecv").detail, HasSubstr("CUDA_VISIBLE_DEVICES=0,1 "));
  expectFailure("gpu.sendrecv", "echo done\n", "GPU0-GPU1: no bus bandwidth in the output of the send/recv", "done");
  EXPECT_EQ(runWithoutNvml("gpu.sendrecv").reason, "NVML not available");
}

// Over four GPUs' six pairs: the slowest is named, and it fails the check
// only below half the median.
TEST(JudgePairsTest, TheSlowestPairIsDegradedBelowHalfTheMedian) {
  std::vector<PairRate> rates = {{"GPU0-GPU1", 300}, {"GPU0-GPU2", 310}, {"GPU0-GPU3", 305},
                                 {"GPU1-GPU2", 298}, {"GPU1-GPU3", 140}, {"GPU2-GPU3", 302}};
  PairVerdict v = judgePairs(rates);
  EXPECT_EQ(rates[v.slowest].pair, "GPU1-GPU3");
  EXPECT_DOUBLE_EQ(v.median_gbps, (300 + 302) / 2.0);
  EXPECT_TRUE(v.degraded);
  rates[4].busbw_gbps = 160;  // above half the median: slow, not failed
  v = judgePairs(rates);
  EXPECT_EQ(rates[v.slowest].pair, "GPU1-GPU3");
  EXPECT_FALSE(v.degraded);
  rates.resize(3);
  EXPECT_DOUBLE_EQ(judgePairs(rates).median_gbps, 305);
}

}  // namespace
}  // namespace dtrain::doctor
