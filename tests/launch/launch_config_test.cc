// parseLaunchArgs: torchrun's defaults and value rules, PET_ precedence, the
// worker command, and the exact message of each bad input.
#include "launch/launch_config.h"
#include "common/process.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <thread>

#include "common/error.h"
#include "launch/log_router.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain {
namespace {

using Args = std::vector<std::string>;
using Env = std::map<std::string, std::string>;
using std::chrono::milliseconds;
using std::chrono::seconds;

const std::string kFixtures = std::string(DTRAIN_SOURCE_DIR) + "/tests/launch/fixtures/";

LaunchConfig parse(const Args& args, const Env& env = {}, const std::string& tree = "no_gpu") {
  return parseLaunchArgs(args, env, kFixtures + tree);
}

std::string parseError(const Args& args, const Env& env = {}, const std::string& tree = "no_gpu") {
  return testing::configErrorOf([&] { parse(args, env, tree); });
}

TEST(LaunchConfigTest, TorchrunDefaults) {
  LaunchConfig c = parse({"train.py"});
  EXPECT_EQ(c.rendezvous.backend, RendezvousBackend::kStatic);
  EXPECT_EQ(c.rendezvous.min_nodes, 1);
  EXPECT_EQ(c.rendezvous.max_nodes, 1);
  EXPECT_EQ(c.rendezvous.node_rank, 0);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_EQ(c.master_port, 29500);
  EXPECT_EQ(c.worker_master_port, 29500) << "static: the workers get master-port, as under torchrun";
  EXPECT_EQ(c.rendezvous.endpoint_host, "127.0.0.1") << "one node: the agent's store on loopback";
  EXPECT_NE(c.rendezvous.endpoint_port, 29500) << "the workers' rank 0 listens there";
  EXPECT_TRUE(std::regex_match(c.rendezvous.run_id, std::regex("job-\\d{8}-\\d{6}-\\d+")))
      << "one node: a run id of its own, not torchrun's none: " << c.rendezvous.run_id;
  EXPECT_FALSE(c.default_omp_num_threads) << "one worker";
  EXPECT_EQ(c.rendezvous.join_timeout, seconds(600));
  EXPECT_EQ(c.rendezvous.local_world_size, 1);
  EXPECT_EQ(c.rendezvous.is_host, -1);
  EXPECT_EQ(c.rendezvous.token, "");
  EXPECT_EQ(c.nproc_per_node, 1);
  EXPECT_EQ(c.max_restarts, 0);
  EXPECT_EQ(c.monitor_interval, milliseconds(100));
  EXPECT_EQ(c.shutdown_timeout, seconds(30));
  EXPECT_EQ(c.exit_barrier_timeout, seconds(300));
  EXPECT_EQ(c.role, "default");
  EXPECT_EQ(c.log_dir, "");
  EXPECT_EQ(c.redirects, (std::map<int, StreamSet>{{kAllLocalRanks, StreamSet::kNone}, {0, StreamSet::kNone}}));
  EXPECT_EQ(c.tees, c.redirects);
  EXPECT_FALSE(c.local_ranks_filter.has_value());
  EXPECT_EQ(c.signals_to_handle, (std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}));
  EXPECT_EQ(c.worker_argv, (Args{"python3", "-u", "train.py"}));
  EXPECT_FALSE(c.standalone);
  EXPECT_FALSE(c.help_requested);
}

TEST(LaunchConfigTest, EveryFlagReachesItsField) {
  LaunchConfig c = parse({"--nnodes=3", "--nproc_per_node", "2", "--node-rank", "2", "--master_addr", "head",
                          "--master-port", "1234", "--local-addr", "10.0.0.7", "--rdzv-id", "job7",
                          "--rdzv-conf", "join_timeout=20,last_call_timeout=0.5,close_timeout=3,is_host=true,"
                          "keep_alive_interval=2,keep_alive_max_attempt=4,read_timeout=9,use_libuv=0",
                          "--max-restarts", "3", "--monitor-interval", "0.25", "--role", "trainer",
                          "--log-dir", "/tmp/logs", "--redirects", "3", "--tee", "0:1,2:2",
                          "--local-ranks-filter", "0,1", "--log-line-prefix-template", "[${rank}]",
                          "--signals-to-handle", "SIGTERM,usr1,HUP,10", "--shutdown-timeout", "0",
                          "--exit-barrier-timeout", "12.5", "--start-method", "fork", "train.py"},
                         {{"DTRAIN_STORE_TOKEN", "s3cret"}});
  EXPECT_EQ(c.rendezvous.max_nodes, 3);
  EXPECT_EQ(c.nproc_per_node, 2);
  EXPECT_EQ(c.rendezvous.local_world_size, 2);
  EXPECT_EQ(c.rendezvous.node_rank, 2);
  EXPECT_EQ(c.rendezvous.endpoint_host, "head");
  EXPECT_EQ(c.rendezvous.endpoint_port, 1235) << "several nodes: the agents' store on master-port + 1";
  EXPECT_EQ(c.worker_master_port, 1234);
  EXPECT_TRUE(c.default_omp_num_threads) << "two workers, OMP_NUM_THREADS unset";
  EXPECT_EQ(c.rendezvous.local_address, "10.0.0.7");
  EXPECT_EQ(c.rendezvous.run_id, "job7");
  EXPECT_EQ(c.rendezvous.join_timeout, seconds(20));
  EXPECT_EQ(c.rendezvous.last_call_timeout, milliseconds(500));
  EXPECT_EQ(c.rendezvous.close_timeout, seconds(3));
  EXPECT_EQ(c.rendezvous.is_host, 1);
  EXPECT_EQ(c.rendezvous.keep_alive_interval, seconds(2));
  EXPECT_EQ(c.rendezvous.keep_alive_max_attempt, 4);
  EXPECT_EQ(c.rendezvous.token, "s3cret");
  EXPECT_EQ(c.max_restarts, 3);
  EXPECT_EQ(c.monitor_interval, milliseconds(250));
  EXPECT_EQ(c.role, "trainer");
  EXPECT_EQ(c.log_dir, "/tmp/logs");
  EXPECT_EQ(c.redirects, (std::map<int, StreamSet>{
                             {kAllLocalRanks, StreamSet::kBoth}, {0, StreamSet::kBoth}, {1, StreamSet::kBoth}}));
  EXPECT_EQ(c.tees, (std::map<int, StreamSet>{
                        {kAllLocalRanks, StreamSet::kNone}, {0, StreamSet::kStdout}, {1, StreamSet::kNone}}))
      << "per-rank form: unnamed ranks get none; rank 2 is beyond nproc";
  EXPECT_EQ(c.local_ranks_filter, (std::set<int>{0, 1}));
  EXPECT_EQ(c.log_line_prefix_template, "[${rank}]");
  EXPECT_EQ(c.signals_to_handle, (std::vector<int>{SIGTERM, SIGUSR1, SIGHUP})) << "10 is SIGUSR1 again";
  EXPECT_EQ(c.shutdown_timeout, milliseconds(0));
  EXPECT_EQ(c.exit_barrier_timeout, milliseconds(12500));
}

TEST(LaunchConfigTest, PetVariablesFillFlagsNotGivenAndFlagsWin) {
  Env env = {{"PET_NNODES", "2"}, {"PET_NPROC_PER_NODE", "4"}, {"PET_NODE_RANK", "1"},
             {"PET_MASTER_ADDR", "pet-host"}, {"PET_MASTER_PORT", "2222"}, {"PET_RDZV_ID", "pet-id"},
             {"PET_RDZV_CONF", "join_timeout=7"}, {"PET_MAX_RESTARTS", "5"}, {"PET_MONITOR_INTERVAL", "2"},
             {"PET_ROLE", "pet-role"}, {"PET_LOG_DIR", "/pet"}, {"PET_REDIRECTS", "1"}, {"PET_TEE", "2"},
             {"PET_LOCAL_RANKS_FILTER", "3"}, {"PET_SIGNALS_TO_HANDLE", "SIGINT"}, {"PET_SHUTDOWN_TIMEOUT", "4"},
             {"PET_EXIT_BARRIER_TIMEOUT", "6"}, {"PET_NO_PYTHON", "1"}};
  LaunchConfig c = parse({"worker.sh"}, env);
  EXPECT_EQ(c.rendezvous.max_nodes, 2);
  EXPECT_EQ(c.nproc_per_node, 4);
  EXPECT_EQ(c.rendezvous.node_rank, 1);
  EXPECT_EQ(c.master_addr, "pet-host");
  EXPECT_EQ(c.rendezvous.endpoint_port, 2223);
  EXPECT_EQ(c.worker_master_port, 2222);
  EXPECT_EQ(c.rendezvous.run_id, "pet-id");
  EXPECT_EQ(c.rendezvous.join_timeout, seconds(7));
  EXPECT_EQ(c.max_restarts, 5);
  EXPECT_EQ(c.monitor_interval, seconds(2));
  EXPECT_EQ(c.role, "pet-role");
  EXPECT_EQ(c.log_dir, "/pet");
  EXPECT_EQ(c.redirects.at(3), StreamSet::kStdout);
  EXPECT_EQ(c.tees.at(kAllLocalRanks), StreamSet::kStderr);
  EXPECT_EQ(c.local_ranks_filter, (std::set<int>{3}));
  EXPECT_EQ(c.signals_to_handle, (std::vector<int>{SIGINT}));
  EXPECT_EQ(c.shutdown_timeout, seconds(4));
  EXPECT_EQ(c.exit_barrier_timeout, seconds(6));
  EXPECT_EQ(c.worker_argv, (Args{"worker.sh"}));

  c = parse({"--nnodes", "4", "--nproc-per-node=1", "--node_rank", "3", "--role", "flag-role", "worker.sh"}, env);
  EXPECT_EQ(c.rendezvous.max_nodes, 4);
  EXPECT_EQ(c.nproc_per_node, 1);
  EXPECT_EQ(c.rendezvous.node_rank, 3);
  EXPECT_EQ(c.role, "flag-role");
  EXPECT_EQ(c.master_addr, "pet-host") << "PET_ still fills the rest";
}

TEST(LaunchConfigTest, PetSwitches) {
  EXPECT_EQ(parse({"pkg.mod"}, {{"PET_MODULE", "1"}}).worker_argv, (Args{"python3", "-u", "-m", "pkg.mod"}));
  EXPECT_EQ(parse({"t.py"}, {{"PET_MODULE", "0"}}).worker_argv, (Args{"python3", "-u", "t.py"}));
  EXPECT_TRUE(parse({"t.py"}, {{"PET_STANDALONE", "true"}}).standalone);
  EXPECT_EQ(parseError({"t.py"}, {{"PET_STANDALONE", "maybe"}}),
            "PET_STANDALONE=maybe: expected 1 or 0 (true/false, yes/no)");
}

TEST(LaunchConfigTest, WorkerCommand) {
  EXPECT_EQ(parse({"train.py", "--lr", "0.1", "--", "-x"}).worker_argv,
            (Args{"python3", "-u", "train.py", "--lr", "0.1", "--", "-x"}));
  EXPECT_EQ(parse({"--", "--odd-name.py", "a"}).worker_argv, (Args{"python3", "-u", "--odd-name.py", "a"}));
  EXPECT_EQ(parse({"-m", "pkg.train", "--epochs", "2"}).worker_argv,
            (Args{"python3", "-u", "-m", "pkg.train", "--epochs", "2"}));
  EXPECT_EQ(parse({"--no-python", "./bin/train", "-v"}).worker_argv, (Args{"./bin/train", "-v"}));
  EXPECT_EQ(parse({"--run-path", "train.py"}).worker_argv, (Args{"python3", "-u", "train.py"}));
  EXPECT_EQ(parse({"train.py"}, {{"PYTHON_EXEC", "/opt/py/bin/python"}}).worker_argv,
            (Args{"/opt/py/bin/python", "-u", "train.py"}));
}

TEST(LaunchConfigTest, ThePythonThatRunsIsKnownByItsFullPath) {
  const std::string dir = testing::makeTempDir("dtrain-launch-config");
  testing::writeFile(dir + "/python3", "#!/bin/sh\n");
  ::chmod((dir + "/python3").c_str(), 0755);
  LaunchConfig c = parse({"t.py"}, {{"PATH", "/nonexistent:" + dir}});
  EXPECT_EQ(c.python_path, dir + "/python3") << "as exec finds it, like torchrun's sys.executable";
  EXPECT_EQ(c.python_origin, "python3 on PATH");
  c = parse({"t.py"}, {{"PYTHON_EXEC", "/opt/py/bin/python"}});
  EXPECT_EQ(c.python_path, "/opt/py/bin/python");
  EXPECT_EQ(c.python_origin, "PYTHON_EXEC");
  EXPECT_EQ(parse({"--no-python", "worker.sh"}).python_path, "");
}

// A compiled program runs as is (python could only fail on it); a script
// that merely exists stays a python script, as under torchrun.
TEST(LaunchConfigTest, ElfProgramRunsWithoutPython) {
  EXPECT_EQ(parse({"/bin/true", "x"}).worker_argv, (Args{"/bin/true", "x"}));
  EXPECT_EQ(parse({"true"}).worker_argv, (Args{"true"}));  // found on PATH
  EXPECT_EQ(parse({DTRAIN_SOURCE_DIR "/scripts/setup.sh"}).worker_argv,
            (Args{"python3", "-u", DTRAIN_SOURCE_DIR "/scripts/setup.sh"}));
  EXPECT_EQ(parse({"-m", "true"}).worker_argv, (Args{"python3", "-u", "-m", "true"}));
}

TEST(LaunchConfigTest, NprocPerNodeWords) {
  const int cpus = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(parse({"--nproc-per-node", "cpu", "t.py"}).nproc_per_node, cpus);
  EXPECT_EQ(parse({"--nproc-per-node", "auto", "t.py"}).nproc_per_node, cpus) << "torchrun: no GPU -> CPUs";
  EXPECT_EQ(parse({"--nproc-per-node", "auto", "t.py"}, {}, "gpus4_proc").nproc_per_node, 4);
  EXPECT_EQ(parse({"--nproc-per-node", "gpu", "t.py"}, {{"CUDA_VISIBLE_DEVICES", "1,3"}}, "gpus4_proc").nproc_per_node, 2);
  EXPECT_EQ(parse({"--nproc-per-node", "gpu", "t.py"}, {}, "gpus4_proc").redirects.size(), 5u);
  EXPECT_EQ(parseError({"--nproc-per-node", "gpu", "t.py"}), "--nproc-per-node gpu: no GPU is visible (CUDA is not available)");
  EXPECT_EQ(parseError({"--nproc-per-node", "gpu", "t.py"}, {{"CUDA_VISIBLE_DEVICES", ""}}, "gpus4_proc"),
            "--nproc-per-node gpu: no GPU is visible (CUDA is not available)");
}

TEST(LaunchConfigTest, RendezvousEndpoints) {
  LaunchConfig c = parse({"--rdzv-backend", "c10d", "--nnodes", "1:4", "--node-rank", "3", "t.py"});
  EXPECT_EQ(c.rendezvous.backend, RendezvousBackend::kC10d);
  EXPECT_EQ(c.rendezvous.endpoint_host, "127.0.0.1");
  EXPECT_EQ(c.rendezvous.endpoint_port, 29400);
  EXPECT_EQ(c.rendezvous.node_rank, -1) << "c10d assigns node ranks";
  EXPECT_EQ(c.rendezvous.min_nodes, 1);
  EXPECT_EQ(c.rendezvous.max_nodes, 4);
  auto endpoint = [](const std::string& text) {
    LaunchConfig e = parse({"--rdzv-backend=c10d", "--rdzv-endpoint=" + text, "t.py"});
    return e.rendezvous.endpoint_host + " " + std::to_string(e.rendezvous.endpoint_port);
  };
  EXPECT_EQ(endpoint("node0"), "node0 29400");
  EXPECT_EQ(endpoint("node0.cluster:1234"), "node0.cluster 1234");
  EXPECT_EQ(endpoint("10.1.2.3:80"), "10.1.2.3 80");
  EXPECT_EQ(endpoint("[fe80::1%eth0]:29401"), "fe80::1%eth0 29401");
  EXPECT_EQ(endpoint("[::1]"), "::1 29400");
  EXPECT_EQ(endpoint(""), "127.0.0.1 29400") << "torchrun: empty is the default";
  c = parse({"--rdzv-endpoint", "store:7000", "--master-addr", "ignored", "--nnodes", "2", "t.py"});
  EXPECT_EQ(c.rendezvous.endpoint_host, "store") << "static: an endpoint given beats master-addr";
  EXPECT_EQ(c.master_addr, "store");
  EXPECT_EQ(c.master_port, 7000);
  EXPECT_EQ(c.worker_master_port, 7000);
  EXPECT_EQ(c.rendezvous.endpoint_port, 7001);
  EXPECT_EQ(parse({"--rdzv-endpoint", "store", "--master-port", "6000", "t.py"}).worker_master_port, 6000);
  EXPECT_EQ(c.rendezvous.run_id, "none") << "several nodes must name one id; torchrun's default";
  EXPECT_EQ(parse({"--rdzv-backend", "c10d", "t.py"}).worker_master_port, 0) << "c10d: the agent picks it";
  EXPECT_EQ(parseError({"--nnodes", "2", "--master-port", "65535", "t.py"}),
            "--master-port 65535: expected a port 1-65534: the agents' store of a static job of several nodes "
            "listens on the port after it");
}

TEST(LaunchConfigTest, Standalone) {
  LaunchConfig a = parse({"--standalone", "--rdzv-id", "ignored", "--rdzv-endpoint", "x:1", "t.py"});
  LaunchConfig b = parse({"--standalone", "t.py"});
  EXPECT_TRUE(a.standalone);
  EXPECT_EQ(a.rendezvous.backend, RendezvousBackend::kC10d);
  EXPECT_EQ(a.rendezvous.endpoint_host, "127.0.0.1");
  EXPECT_GT(a.rendezvous.endpoint_port, 0);
  EXPECT_EQ(a.rendezvous.run_id.size(), 36u) << a.rendezvous.run_id;
  EXPECT_EQ(a.rendezvous.run_id[14], '4') << "a version-4 UUID";
  EXPECT_NE(a.rendezvous.run_id, b.rendezvous.run_id);
  EXPECT_EQ(a.rendezvous.max_nodes, 1);
}

TEST(LaunchConfigTest, HelpStopsParsing) {
  LaunchConfig c = parse({"--nnodes", "3:2", "--help"});
  EXPECT_TRUE(c.help_requested);
  EXPECT_TRUE(c.worker_argv.empty());
}

TEST(LaunchConfigTest, BadInputNamesTheFlagAndWhatWasExpected) {
  const std::pair<Args, std::string> cases[] = {
      {{"--frobnicate", "t.py"}, "unrecognized argument --frobnicate"},
      {{"--nnodes", "3:2", "t.py"}, "--nnodes 3:2: MIN must not exceed MAX"},
      {{"--nnodes", "0", "t.py"}, "--nnodes 0: expected N or MIN:MAX, positive integers"},
      {{"--nnodes", "1:2:3", "t.py"}, "--nnodes 1:2:3: expected N or MIN:MAX, positive integers"},
      {{"--nnodes", "two", "t.py"}, "--nnodes two: expected N or MIN:MAX, positive integers"},
      {{"--nnodes", "1:2", "t.py"}, "--nnodes 1:2: the static rendezvous needs a fixed node count; use --rdzv-backend c10d for MIN:MAX"},
      {{"--nproc-per-node", "0", "t.py"}, "--nproc-per-node 0: expected a positive integer, auto, gpu or cpu"},
      {{"--nproc_per_node=x", "t.py"}, "--nproc_per_node x: expected a positive integer, auto, gpu or cpu"},
      {{"--master-port", "70000", "t.py"}, "--master-port 70000: expected a port 1-65535"},
      {{"--master-port", "0", "t.py"}, "--master-port 0: expected a port 1-65535"},
      {{"--master-addr=", "t.py"}, "--master-addr : expected a host name or address"},
      {{"--nnodes", "2", "--node-rank", "2", "t.py"}, "--node-rank 2: expected a node rank below the number of nodes (2)"},
      {{"--node-rank", "-1", "t.py"}, "--node-rank -1: expected an integer >= 0"},
      {{"--rdzv-backend", "etcd-v2", "t.py"},
       "--rdzv-backend etcd-v2: expected static, c10d or etcd (alias etcd-v3; etcd-v2 is not supported)"},
      {{"--rdzv-backend", "etcd", "t.py"},
       "--rdzv-backend etcd needs --rdzv-endpoint with the etcd cluster's members"},
      {{"--rdzv-backend", "etcd", "--rdzv-endpoint", "10.0.0.1:2379,,10.0.0.2:2379", "t.py"}, "--rdzv-endpoint"},
      {{"--rdzv-endpoint", "h:99999", "t.py"}, "--rdzv-endpoint h:99999: expected a port 1-65535 after the host"},
      {{"--rdzv-endpoint", "h:", "t.py"}, "--rdzv-endpoint h:: expected a port 1-65535 after the host"},
      {{"--rdzv-endpoint", "::1", "t.py"}, "--rdzv-endpoint ::1: an IPv6 address goes in brackets: [ADDR]:PORT"},
      {{"--rdzv-endpoint", "[::1:80", "t.py"}, "--rdzv-endpoint [::1:80: '[' of an IPv6 address is never closed"},
      {{"--rdzv-endpoint", "[::1]80", "t.py"}, "--rdzv-endpoint [::1]80: expected HOST[:PORT] or [IPV6][:PORT]"},
      {{"--rdzv-endpoint", ":80", "t.py"}, "--rdzv-endpoint :80: the host is missing; expected HOST[:PORT]"},
      {{"--rdzv-endpoint", "a/b", "t.py"}, "--rdzv-endpoint a/b: the host must be a name, an IPv4 or an IPv6 address"},
      {{"--rdzv-id=", "t.py"}, "--rdzv-id : expected a run id"},
      {{"--rdzv-conf", "frob=1", "t.py"}, "--rdzv-conf frob=1: unknown option 'frob'; known: join_timeout, last_call_timeout, close_timeout, timeout, keep_alive_interval, keep_alive_max_attempt, is_host, read_timeout, use_libuv"},
      {{"--rdzv-conf", "join_timeout", "t.py"}, "--rdzv-conf join_timeout: the option 'join_timeout' needs a value (KEY=VALUE)"},
      {{"--rdzv-conf", "=3", "t.py"}, "--rdzv-conf =3: expected KEY=VALUE,KEY=VALUE"},
      {{"--rdzv-conf", "join_timeout=0", "t.py"}, "--rdzv-conf join_timeout=0: expected a number of seconds > 0"},
      {{"--rdzv-conf", "is_host=maybe", "t.py"}, "--rdzv-conf is_host=maybe: expected 1 or 0 (true/false, yes/no)"},
      {{"--rdzv-conf", "keep_alive_max_attempt=0", "t.py"}, "--rdzv-conf keep_alive_max_attempt=0: expected an integer >= 1"},
      {{"--max-restarts", "-1", "t.py"}, "--max-restarts -1: expected an integer >= 0"},
      {{"--monitor-interval", "0", "t.py"}, "--monitor-interval 0: expected a number of seconds > 0"},
      {{"--monitor-interval", "nan", "t.py"}, "--monitor-interval nan: expected a number of seconds > 0"},
      {{"--shutdown-timeout", "-5", "t.py"}, "--shutdown-timeout -5: expected a number of seconds >= 0"},
      {{"--exit-barrier-timeout", "soon", "t.py"}, "--exit-barrier-timeout soon: expected a number of seconds >= 0"},
      {{"--start-method", "thread", "t.py"}, "--start-method thread: expected spawn, fork or forkserver"},
      {{"--role=", "t.py"}, "--role : expected a role name"},
      {{"-r", "4", "t.py"}, "-r 4: expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both), or per local rank like 0:1,1:2"},
      {{"--tee", "0:5", "t.py"}, "--tee 0:5: expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both), or per local rank like 0:1,1:2"},
      {{"--tee", "x:1", "t.py"}, "--tee x:1: expected 0 (none)"},
      {{"--local-ranks-filter", "0,x", "t.py"}, "--local-ranks-filter 0,x: expected a comma-separated list of local ranks, like 0,1,2"},
      {{"--signals-to-handle", "SIGTERM,SIGFOO", "t.py"}, "--signals-to-handle SIGTERM,SIGFOO: unknown signal 'SIGFOO'; expected names like SIGTERM,SIGUSR1"},
      {{"--signals-to-handle", "SIGKILL", "t.py"}, "--signals-to-handle SIGKILL: SIGKILL cannot be caught"},
      {{"--signals-to-handle=", "t.py"}, "--signals-to-handle : unknown signal ''"},
      {{"--standalone", "--nnodes", "2", "t.py"}, "--nnodes 2: --standalone runs a single node; expected 1"},
      {{"-m", "--no-python", "t.py"}, "--module and --no-python cannot be used together (-m runs python -m MODULE)"},
      {{"--nnodes", "2"}, "the training script is missing: dtrain launch [options] training_script [args ...]"},
      {{}, "the training script is missing"},
  };
  for (const auto& [args, fragment] : cases) {
    const std::string message = parseError(args);
    EXPECT_EQ(message.rfind(fragment, 0), 0u) << "got: " << message << "\nwanted: " << fragment;
  }
  EXPECT_EQ(parseError({"t.py"}, {{"PET_NNODES", "3:2"}}), "PET_NNODES=3:2: MIN must not exceed MAX");
  EXPECT_EQ(parseError({"t.py"}, {{"PET_MASTER_PORT", "http"}}), "PET_MASTER_PORT=http: expected a port 1-65535");
  EXPECT_EQ(parseError({"t.py"}, {{"PET_RDZV_CONF", "close_timeout=-1"}}),
            "PET_RDZV_CONF close_timeout=-1: expected a number of seconds > 0");
}

// The workers present the file's token, so the agent's store must demand it:
// a token file that launch ignored left the store open to anyone.
TEST(LaunchConfigTest, TheStoreTokenFileProtectsTheAgentsStore) {
  const std::string dir = ::testing::TempDir() + "launch_token_" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0700);
  const std::string file = dir + "/token";
  { std::ofstream(file) << "from-the-file\n"; }
  ::chmod(file.c_str(), 0600);
  EXPECT_EQ(parse({"t.py"}, {{"DTRAIN_STORE_TOKEN_FILE", file}}).rendezvous.token, "from-the-file");
  EXPECT_EQ(parse({"t.py"}, {{"DTRAIN_STORE_TOKEN_FILE", file}, {"DTRAIN_STORE_TOKEN", "var"}}).rendezvous.token,
            "var");
  EXPECT_EQ(parseError({"t.py"}, {{"DTRAIN_STORE_TOKEN_FILE", dir}}),
            "the store token file '" + dir +
                "' (DTRAIN_STORE_TOKEN_FILE) is a directory; expected a regular file holding the token");
  { std::ofstream(file, std::ios::trunc) << "\n"; }
  EXPECT_EQ(parseError({"t.py"}, {{"DTRAIN_STORE_TOKEN_FILE", file}}),
            "the store token file '" + file +
                "' (DTRAIN_STORE_TOKEN_FILE) is empty; expected the token on its first line (unset the variable "
                "to run without authentication)");
  std::remove(file.c_str());
  ::rmdir(dir.c_str());
}

TEST(LaunchConfigTest, CurrentEnvironmentReadsTheProcessEnvironment) {
  ::setenv("DTRAIN_LAUNCH_CONFIG_TEST", "a=b", 1);
  EXPECT_EQ(currentEnvironment().at("DTRAIN_LAUNCH_CONFIG_TEST"), "a=b");
  ::unsetenv("DTRAIN_LAUNCH_CONFIG_TEST");
  EXPECT_EQ(currentEnvironment().count("DTRAIN_LAUNCH_CONFIG_TEST"), 0u);
}

}  // namespace
}  // namespace dtrain
