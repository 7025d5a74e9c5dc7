// applySlurmEnvironment alone, and its place in parseLaunchArgs' precedence:
// flag > PET_ variable > Slurm > default.
#include "launch/slurm.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "tests/support/text.h"

namespace dtrain {
namespace {

using Env = std::map<std::string, std::string>;

const std::string kSlurmFixtures = std::string(DTRAIN_SOURCE_DIR) + "/tests/launch/fixtures/";
const std::string kNoGpu = kSlurmFixtures + "no_gpu";

// What `srun -N4 --gpus-per-node=8` gives the task on the third node.
Env slurmJob() {
  return {{"SLURM_JOB_ID", "4242"},         {"SLURM_JOB_NUM_NODES", "4"},
          {"SLURM_NNODES", "4"},            {"SLURM_NODEID", "2"},
          {"SLURM_JOB_NODELIST", "gpu[007-010]"}, {"SLURM_NODELIST", "gpu[007-010]"},
          {"SLURM_GPUS_ON_NODE", "8"}};
}

LaunchConfig applied(const Env& env, const std::set<std::string>& given = {}, bool standalone = false,
                     const std::string& root = kNoGpu) {
  LaunchConfig config;
  config.master_addr = "127.0.0.1";
  config.standalone = standalone;
  applySlurmEnvironment(config, env, given, root);
  return config;
}

std::string slurmError(const Env& env) {
  return testing::configErrorOf([&] { applied(env); });
}

LaunchConfig parseSlurm(std::vector<std::string> args, const Env& env, const std::string& root = kNoGpu) {
  args.push_back("train.py");
  return parseLaunchArgs(args, env, root);
}

TEST(SlurmTest, NothingChangesOutsideSlurm) {
  Env env = slurmJob();
  env.erase("SLURM_JOB_ID");
  LaunchConfig config = applied(env);
  EXPECT_EQ(config.rendezvous.max_nodes, 1);
  EXPECT_EQ(config.nproc_per_node, 1);
  EXPECT_EQ(config.master_addr, "127.0.0.1");
  EXPECT_EQ(config.rendezvous.run_id, "none");
}

TEST(SlurmTest, JobVariablesFillTheConfig) {
  LaunchConfig config = applied(slurmJob());
  EXPECT_EQ(config.rendezvous.min_nodes, 4);
  EXPECT_EQ(config.rendezvous.max_nodes, 4);
  EXPECT_EQ(config.rendezvous.node_rank, 2);
  EXPECT_EQ(config.master_addr, "gpu007");
  EXPECT_EQ(config.rendezvous.endpoint_host, "gpu007");
  EXPECT_EQ(config.nproc_per_node, 8);
  EXPECT_EQ(config.rendezvous.run_id, "4242");
}

TEST(SlurmTest, OlderNamesAndStepNames) {
  Env env = {{"SLURM_JOB_ID", "7"}, {"SLURM_NNODES", "3"}, {"SLURM_NODELIST", "a[1-3]"}};
  LaunchConfig config = applied(env);
  EXPECT_EQ(config.rendezvous.max_nodes, 3);
  EXPECT_EQ(config.master_addr, "a1");
  // Inside `srun -N2` of a 4-node job the step's own count and list apply.
  env = slurmJob();
  env["SLURM_STEP_NUM_NODES"] = "2";
  env["SLURM_STEP_NODELIST"] = "gpu[009-010]";
  config = applied(env);
  EXPECT_EQ(config.rendezvous.max_nodes, 2);
  EXPECT_EQ(config.master_addr, "gpu009");
}

TEST(SlurmTest, GpusFromSlurmElseVisibleElseUnchanged) {
  Env env = slurmJob();
  env.erase("SLURM_GPUS_ON_NODE");
  EXPECT_EQ(applied(env).nproc_per_node, 1) << "no GPU anywhere: the default stays";
  EXPECT_EQ(applied(env, {}, false, kSlurmFixtures + "gpus4_proc").nproc_per_node, 4);
  env["CUDA_VISIBLE_DEVICES"] = "0,1";  // what Slurm's gres plugin sets
  EXPECT_EQ(applied(env, {}, false, kSlurmFixtures + "gpus4_proc").nproc_per_node, 2);
  env["SLURM_GPUS_ON_NODE"] = "0";
  EXPECT_EQ(applied(env, {}, false, kSlurmFixtures + "gpus4_proc").nproc_per_node, 2);
}

TEST(SlurmTest, GivenFlagsAreLeftAlone) {
  LaunchConfig config =
      applied(slurmJob(), {"nnodes", "node-rank", "master-addr", "rdzv-endpoint", "nproc-per-node", "rdzv-id"});
  EXPECT_EQ(config.rendezvous.max_nodes, 1);
  EXPECT_EQ(config.rendezvous.node_rank, -1);
  EXPECT_EQ(config.master_addr, "127.0.0.1");
  EXPECT_EQ(config.rendezvous.endpoint_host, "127.0.0.1");
  EXPECT_EQ(config.nproc_per_node, 1);
  EXPECT_EQ(config.rendezvous.run_id, "none");
}

TEST(SlurmTest, StandaloneTakesOnlyTheGpuCount) {
  LaunchConfig config = applied(slurmJob(), {}, true);
  EXPECT_EQ(config.nproc_per_node, 8);
  EXPECT_EQ(config.rendezvous.max_nodes, 1);
  EXPECT_EQ(config.master_addr, "127.0.0.1");
  EXPECT_EQ(config.rendezvous.run_id, "none");
}

TEST(SlurmTest, MalformedVariablesAreNamed) {
  Env env = slurmJob();
  env["SLURM_NODEID"] = "two";
  EXPECT_EQ(slurmError(env), "SLURM_NODEID='two' is not an integer");
  env = slurmJob();
  env["SLURM_JOB_NUM_NODES"] = "0";
  EXPECT_EQ(slurmError(env), "SLURM_JOB_NUM_NODES='0' is out of range; expected an integer >= 1");
  env = slurmJob();
  env["SLURM_JOB_NODELIST"] = "gpu[010-007]";
  EXPECT_EQ(slurmError(env), "SLURM_JOB_NODELIST: hostlist \"gpu[010-007]\": range 010-007 is reversed at position 4");
  env = slurmJob();
  env["SLURM_GPUS_ON_NODE"] = "eight";
  EXPECT_EQ(slurmError(env), "SLURM_GPUS_ON_NODE='eight' is not an integer");
}

TEST(SlurmPrecedenceTest, SlurmFillsTheStaticRendezvous) {
  LaunchConfig config = parseSlurm({}, slurmJob());
  EXPECT_EQ(config.rendezvous.backend, RendezvousBackend::kStatic);
  EXPECT_EQ(config.rendezvous.max_nodes, 4);
  EXPECT_EQ(config.rendezvous.node_rank, 2);
  EXPECT_EQ(config.rendezvous.endpoint_host, "gpu007");
  EXPECT_EQ(config.rendezvous.endpoint_port, 29501) << "the agents' store: master-port + 1";
  EXPECT_EQ(config.worker_master_port, 29500);
  EXPECT_EQ(config.rendezvous.run_id, "4242");
  EXPECT_EQ(config.nproc_per_node, 8);
  EXPECT_EQ(config.rendezvous.local_world_size, 8);
  EXPECT_EQ(config.redirects.size(), 9u) << "ranks 0..7 and the `all` entry";
}

TEST(SlurmPrecedenceTest, FlagsAndPetVariablesBeatSlurm) {
  Env env = slurmJob();
  env["PET_NPROC_PER_NODE"] = "2";
  env["PET_MASTER_ADDR"] = "head";
  env["PET_RDZV_ID"] = "from-pet";
  LaunchConfig config = parseSlurm({"--nnodes", "3", "--rdzv-id", "from-flag"}, env);
  EXPECT_EQ(config.rendezvous.max_nodes, 3);
  EXPECT_EQ(config.rendezvous.node_rank, 2) << "still SLURM_NODEID";
  EXPECT_EQ(config.nproc_per_node, 2);
  EXPECT_EQ(config.master_addr, "head");
  EXPECT_EQ(config.rendezvous.endpoint_host, "head");
  EXPECT_EQ(config.rendezvous.run_id, "from-flag");
  env["PET_NODE_RANK"] = "0";
  EXPECT_EQ(parseSlurm({"--nnodes", "3"}, env).rendezvous.node_rank, 0);
}

TEST(SlurmPrecedenceTest, SlurmNodeRankOutsideAGivenNodeCountIsNamed) {
  try {
    parseSlurm({"--nnodes", "2"}, slurmJob());
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.message(), "node rank 2 from SLURM_NODEID: expected a node rank below the number of nodes (2)");
  }
}

TEST(SlurmPrecedenceTest, C10dUsesTheFirstHostUnlessAnEndpointIsGiven) {
  LaunchConfig config = parseSlurm({"--rdzv-backend", "c10d", "--nnodes", "2:4"}, slurmJob());
  EXPECT_EQ(config.rendezvous.endpoint_host, "gpu007");
  EXPECT_EQ(config.rendezvous.endpoint_port, 29400);
  EXPECT_EQ(config.rendezvous.node_rank, -1);
  EXPECT_EQ(config.rendezvous.min_nodes, 2);
  config = parseSlurm({"--rdzv-backend=c10d", "--rdzv-endpoint=store.example:1234"}, slurmJob());
  EXPECT_EQ(config.rendezvous.endpoint_host, "store.example");
  EXPECT_EQ(config.rendezvous.endpoint_port, 1234);
  EXPECT_EQ(config.rendezvous.max_nodes, 4);
}

TEST(SlurmPrecedenceTest, StandaloneUnderSlurmStaysOnOneNode) {
  LaunchConfig config = parseSlurm({"--standalone"}, slurmJob());
  EXPECT_EQ(config.rendezvous.max_nodes, 1);
  EXPECT_EQ(config.rendezvous.endpoint_host, "127.0.0.1");
  EXPECT_NE(config.rendezvous.run_id, "4242");
  EXPECT_EQ(config.nproc_per_node, 8);
}

}  // namespace
}  // namespace dtrain
