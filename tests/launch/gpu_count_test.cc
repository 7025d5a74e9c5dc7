// countVisibleGpus against fixture trees (tests/launch/fixtures/<tree>/
// {proc/driver/nvidia/gpus,dev}) and CUDA_VISIBLE_DEVICES as CUDA reads it.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "launch/launch_config.h"

namespace dtrain {
namespace {

const std::string kGpuFixtures = std::string(DTRAIN_SOURCE_DIR) + "/tests/launch/fixtures/";

int count(const std::string& tree, std::map<std::string, std::string> env = {}) {
  return countVisibleGpus(env, kGpuFixtures + tree);
}

int visible(const std::string& cuda_visible_devices, const std::string& tree = "gpus4_proc") {
  return count(tree, {{"CUDA_VISIBLE_DEVICES", cuda_visible_devices}});
}

TEST(GpuCountTest, ProcfsDirectoriesAreTheGpus) {
  // 4 PCI directories (a stray file is not one); its 8 /dev nodes are not looked at.
  EXPECT_EQ(count("gpus4_proc"), 4);
  EXPECT_EQ(count("gpus8_proc"), 8);
}

TEST(GpuCountTest, DevNodesWhenProcfsListsNone) {
  // nvidia0 and nvidia1; not nvidiactl, nvidia-uvm, nvidia-modeset, nvidia, nvidia-caps/.
  EXPECT_EQ(count("gpus2_dev"), 2);
}

TEST(GpuCountTest, NoDriverNoGpus) {
  EXPECT_EQ(count("no_gpu"), 0);
  EXPECT_EQ(count("does_not_exist"), 0);
  EXPECT_EQ(count("no_gpu", {{"CUDA_VISIBLE_DEVICES", "0,1"}}), 0) << "a list cannot add devices";
}

TEST(GpuCountTest, UnsetMeansAllEmptyOrMinusOneMeansNone) {
  EXPECT_EQ(count("gpus4_proc", {{"OTHER", "x"}}), 4);
  EXPECT_EQ(visible(""), 0);
  EXPECT_EQ(visible("-1"), 0);
  EXPECT_EQ(visible("-1,0,1"), 0);
  EXPECT_EQ(visible("NoDevFiles"), 0);
}

TEST(GpuCountTest, IndexListsStopAtTheFirstInvalidEntry) {
  EXPECT_EQ(visible("0"), 1);
  EXPECT_EQ(visible("3,1"), 2);
  EXPECT_EQ(visible("0,1,2,3"), 4);
  EXPECT_EQ(visible(" 2 , 0 "), 2) << "blanks around entries are ignored";
  EXPECT_EQ(visible("0,1,-1,2"), 2) << "a negative entry ends the list";
  EXPECT_EQ(visible("0,x,2"), 1) << "a non-number ends the list";
  EXPECT_EQ(visible("0,,2"), 1) << "an empty entry ends the list";
  EXPECT_EQ(visible("1gpu,2"), 2) << "strtoul-like: the leading number counts";
  EXPECT_EQ(visible("0,4,1"), 1) << "index 4 of 4 GPUs does not exist: the list ends there";
  EXPECT_EQ(visible("7"), 0);
  EXPECT_EQ(visible("0,1", "gpus2_dev"), 2);
  EXPECT_EQ(visible("1,2", "gpus2_dev"), 1);
}

TEST(GpuCountTest, ARepeatedEntryHidesEveryDevice) {
  EXPECT_EQ(visible("0,1,0"), 0);
  EXPECT_EQ(visible("GPU-aaaa,GPU-bbbb,GPU-aaaa"), 0);
}

TEST(GpuCountTest, UuidsAreCountedAsGiven) {
  EXPECT_EQ(visible("GPU-8c5a6b1e-0d41-4a6b-9f8e-000000000001"), 1);
  EXPECT_EQ(visible("GPU-a,GPU-b,GPU-c"), 3);
  EXPECT_EQ(visible("GPU-a,0,GPU-c"), 1) << "an index after UUIDs ends the list";
  EXPECT_EQ(visible("0,GPU-a"), 1) << "a UUID after indices ends the list";
  EXPECT_EQ(visible("GPU-a,GPU-b,GPU-c", "gpus2_dev"), 2) << "no more GPU UUIDs than GPUs";
  EXPECT_EQ(visible("MIG-a,MIG-b,MIG-c", "gpus2_dev"), 3) << "MIG instances are not capped";
}

}  // namespace
}  // namespace dtrain
