// The doctor runner (selection, a check that throws, exit codes) and the
// report (table, JSON, --list) on made-up checks.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/error.h"
#include "doctor/doctor.h"
#include "doctor/report.h"
#include "tests/support/text.h"

namespace dtrain::doctor {
namespace {

using testing::contains;

CheckSpec spec(const std::string& name, bool active = false) {
  return {name, "describes " + name, active, [name](const DoctorContext&) { return pass(name, "fine"); }};
}

std::vector<CheckSpec> sampleChecks() {
  return {spec("gpu.count"), spec("gpu.allreduce", true), spec("rdma.ports"), spec("host.memlock"),
          spec("host.shm"),  spec("peers.reachable", true)};
}

std::vector<std::string> names(const std::vector<CheckSpec>& checks) {
  std::vector<std::string> out;
  for (const CheckSpec& c : checks) out.push_back(c.name);
  return out;
}

TEST(DoctorRunner, AllChecksHaveDottedNamesInKnownGroupsAndAreUnique) {
  std::vector<CheckSpec> all = allChecks();
  std::set<std::string> seen;
  for (const CheckSpec& c : all) {
    std::string group = c.name.substr(0, c.name.find('.'));
    EXPECT_TRUE(group == "gpu" || group == "rdma" || group == "nccl" || group == "host" || group == "peers")
        << c.name;
    EXPECT_NE(c.name.find('.'), std::string::npos) << c.name;
    EXPECT_TRUE(seen.insert(c.name).second) << "duplicate " << c.name;
    EXPECT_FALSE(c.description.empty()) << c.name;
    EXPECT_TRUE(static_cast<bool>(c.run)) << c.name;
  }
  for (const char* expected : {"rdma.ports", "rdma.gpudirect", "nccl.socket_ifname", "nccl.ib_hca",
                               "nccl.debug_env", "host.socket_buffers", "host.memlock", "host.shm",
                               "host.selinux", "host.firewall", "host.time_sync", "host.numa", "peers.reachable"}) {
    EXPECT_TRUE(seen.count(expected)) << expected;
  }
}

TEST(DoctorRunner, ActiveChecksAreLeftOutUnlessTheirOptionIsGiven) {
  DoctorOptions options;
  EXPECT_EQ(names(selectChecks(sampleChecks(), {}, {}, options)),
            (std::vector<std::string>{"gpu.count", "rdma.ports", "host.memlock", "host.shm"}));
  options.peers = {"node2:29600"};
  options.allreduce = true;
  EXPECT_EQ(names(selectChecks(sampleChecks(), {}, {}, options)).size(), 6u);
}

TEST(DoctorRunner, CheckAndSkipTakeNamesAndGroups) {
  DoctorOptions options;
  EXPECT_EQ(names(selectChecks(sampleChecks(), {"host", "gpu.count"}, {}, options)),
            (std::vector<std::string>{"gpu.count", "host.memlock", "host.shm"}));
  EXPECT_EQ(names(selectChecks(sampleChecks(), {}, {"host.shm", "gpu"}, options)),
            (std::vector<std::string>{"rdma.ports", "host.memlock"}));
  EXPECT_EQ(names(selectChecks(sampleChecks(), {"gpu"}, {}, options)), (std::vector<std::string>{"gpu.count"}));
}

TEST(DoctorRunner, UnknownNamesAreConfigErrorsListingTheValidOnes) {
  DoctorOptions options;
  try {
    selectChecks(sampleChecks(), {"host.memlok"}, {}, options);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.message(), "--check: unknown check 'host.memlok'")) << e.message();
    EXPECT_TRUE(contains(e.message(), "host, host.memlock, host.shm")) << e.message();
  }
  EXPECT_THROW(selectChecks(sampleChecks(), {}, {"disk"}, options), ConfigError);
  EXPECT_THROW(splitNameList("host,,gpu", "--check"), ConfigError);
  EXPECT_THROW(splitNameList("host,", "--skip"), ConfigError);
  EXPECT_EQ(splitNameList(" host , gpu.count", "--check"), (std::vector<std::string>{"host", "gpu.count"}));
}

TEST(DoctorRunner, NamingAnActiveCheckWithoutItsOptionIsAConfigError) {
  DoctorOptions options;
  try {
    selectChecks(sampleChecks(), {"peers"}, {}, options);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.message(), "--peers")) << e.message();
  }
  EXPECT_THROW(selectChecks(sampleChecks(), {"gpu.allreduce"}, {}, options), ConfigError);
}

TEST(DoctorRunner, ACheckThatThrowsBecomesAFailure) {
  std::vector<CheckSpec> checks = {
      {"host.a", "throws", false, [](const DoctorContext&) -> CheckResult { throw std::runtime_error("boom"); }},
      {"host.b", "throws dtrain", false,
       [](const DoctorContext&) -> CheckResult { throw IoError("open /sys/x failed"); }},
      {"host.c", "wrong name", false, [](const DoctorContext&) { return pass("other", "ok"); }},
  };
  SystemRoot root("/");
  std::map<std::string, std::string> env;
  DoctorOptions options;
  DoctorContext ctx{root, env, options, nullptr, {}};
  std::vector<CheckResult> results = runChecks(checks, ctx);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].status, Status::kFail);
  EXPECT_EQ(results[0].reason, "check raised: boom");
  EXPECT_EQ(results[1].reason, "check raised: open /sys/x failed");
  EXPECT_EQ(results[2].name, "host.c");
  EXPECT_EQ(exitCodeFor(results, false), 2);
}

TEST(DoctorRunner, ExitCodes) {
  std::vector<CheckResult> ok = {pass("a.b", "x"), skip("a.c", "y")};
  std::vector<CheckResult> warned = {pass("a.b", "x"), warn("a.c", "y", "z")};
  std::vector<CheckResult> failed = {warn("a.c", "y", "z"), fail("a.d", "y", "z")};
  EXPECT_EQ(exitCodeFor(ok, false), 0);
  EXPECT_EQ(exitCodeFor(ok, true), 0);
  EXPECT_EQ(exitCodeFor(warned, false), 0);
  EXPECT_EQ(exitCodeFor(warned, true), 1);
  EXPECT_EQ(exitCodeFor(failed, false), 2);
  EXPECT_EQ(exitCodeFor(failed, true), 2);
}

DoctorReport sampleReport() {
  DoctorReport report;
  report.host = "node7";
  report.root = "/tmp/fixture";
  report.results = {pass("host.selinux", "SELinux not enabled"),
                    warn("host.socket_buffers", "net.core.rmem_max 212992 below 134217728", "sysctl -w x=1",
                         "net.core.rmem_max = 212992\nnet.core.wmem_max = 268435456\n"),
                    fail("rdma.ports", "no RDMA port is active", "check the cable"),
                    skip("host.numa", "NVML not available")};
  report.exit_code = 2;
  return report;
}

TEST(DoctorReport, TableHasHeaderRowsHintsDetailAndSummary) {
  std::string table = formatTable(sampleReport(), false);
  EXPECT_EQ(table.rfind("dtrain doctor: node7 (root /tmp/fixture)\n", 0), 0u) << table;
  EXPECT_TRUE(contains(table, "CHECK                STATUS  REASON\n")) << table;
  EXPECT_TRUE(contains(table, "host.socket_buffers  WARN    net.core.rmem_max 212992 below 134217728\n")) << table;
  const std::string indent(21 + 8, ' ');  // the name column (longest name + 2) and the status column
  EXPECT_TRUE(contains(table, "\n" + indent + "hint: sysctl -w x=1\n")) << table;
  EXPECT_TRUE(contains(table, "\n" + indent + "  net.core.wmem_max = 268435456\n")) << table;
  EXPECT_TRUE(contains(table, "hint: check the cable")) << table;
  EXPECT_FALSE(contains(table, "hint: \n")) << table;
  EXPECT_TRUE(contains(table, "\n1 passed, 1 warning, 1 failed, 1 skipped\n")) << table;
  EXPECT_FALSE(contains(table, "\033[")) << "colour without a terminal";
  EXPECT_TRUE(contains(formatTable(sampleReport(), true), "\033[33mWARN\033[0m"));
}

TEST(DoctorReport, JsonFollowsTheSchema) {
  nlohmann::json doc = nlohmann::json::parse(formatJson(sampleReport()));
  EXPECT_EQ(doc["host"], "node7");
  EXPECT_EQ(doc["root"], "/tmp/fixture");
  EXPECT_EQ(doc["exit_code"], 2);
  ASSERT_EQ(doc["checks"].size(), 4u);
  const auto& check = doc["checks"][1];
  EXPECT_EQ(check["name"], "host.socket_buffers");
  EXPECT_EQ(check["status"], "WARN");
  EXPECT_EQ(check["hint"], "sysctl -w x=1");
  EXPECT_TRUE(check["detail"].is_string());
  for (const auto& c : doc["checks"]) EXPECT_EQ(c.size(), 5u) << c.dump();
  EXPECT_EQ(doc["summary"], nlohmann::json::parse(R"({"pass":1,"warn":1,"fail":1,"skip":1})"));
  EXPECT_EQ(doc.size(), 5u);
}

TEST(DoctorReport, JsonSurvivesBytesThatAreNotUtf8) {
  DoctorReport report = sampleReport();
  report.results[0].reason = std::string("bad \xff\xfe bytes");
  EXPECT_NO_THROW(nlohmann::json::parse(formatJson(report)));
}

TEST(DoctorReport, ListNamesEveryCheckAndTheOptionOfActiveOnes) {
  std::string list = formatCheckList(sampleChecks());
  EXPECT_TRUE(contains(list, "gpu.count        describes gpu.count\n")) << list;
  EXPECT_TRUE(contains(list, "peers.reachable  describes peers.reachable (active: runs with --peers")) << list;
  EXPECT_TRUE(contains(list, "gpu.allreduce    describes gpu.allreduce (active: runs with --allreduce)")) << list;
}

}  // namespace
}  // namespace dtrain::doctor
