// Job status files (metrics/job_status.h): one folder per user that no other
// user can write in, and a lister that drops the files of processes that are
// gone. The writers are real processes forked from the test; the tests that
// act as another user (uid 65534) run only as root.
#include "metrics/job_status.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/forked_child.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::metrics {
namespace {

using nlohmann::json;
using testing::contains;
using testing::ForkedChild;

constexpr uid_t kOtherUser = 65534;  // nobody

struct stat statOf(const std::string& path) {
  struct stat st{};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

// What a training job's rank 0 writes.
std::string statusOf(const std::string& job) {
  const ProcessIdentity self = thisProcess();
  return json{{"job", job},           {"world_size", 2},
              {"samples_per_s", 100}, {"pid", self.pid},
              {"start_time", self.start_time}, {"pid_ns", self.pid_namespace}}
      .dump();
}

json listed(const std::string& dir) { return json::parse(listJobs(dir).json); }

// A writer process: writes its job's status file (as `uid` when given),
// reports "written" or why not, then runs until killed.
std::unique_ptr<ForkedChild> startWriter(const std::string& dir, const std::string& job, uid_t uid = ::geteuid()) {
  auto child = std::make_unique<ForkedChild>([dir, job, uid](const testing::ChildSide& side) {
    if (uid != ::geteuid() && (::setgid(uid) != 0 || ::setuid(uid) != 0)) {
      side.report("setuid failed");
      return 1;
    }
    ::umask(022);
    std::string why;
    side.report(writeJobStatus(jobStatusPath(dir, job), statusOf(job), &why) ? "written" : "not written: " + why);
    side.waitForRelease();
    return 0;
  });
  return child;
}

std::string firstReport(ForkedChild& child) {
  // The child reports once and then waits; read until its report is whole.
  std::string report;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (report.empty() && std::chrono::steady_clock::now() < deadline) {
    report = child.readReport(std::chrono::steady_clock::now() + std::chrono::milliseconds(200), 256);
  }
  return report;
}

TEST(JobStatusTest, EachUserWritesInAFolderOfItsOwn) {
  testing::TempDir tmp("dtrain-jobs-test");
  const std::string dir = tmp / "jobs";
  const std::string path = jobStatusPath(dir, "my job/1");
  EXPECT_EQ(path, dir + "/" + std::to_string(::geteuid()) + "/my_job_1.json");
  ASSERT_TRUE(writeJobStatus(path, statusOf("my job/1")));
  // The shared directory as /tmp: anyone creates a folder, no one removes another's.
  EXPECT_EQ(statOf(dir).st_mode & 07777, 01777u);
  const struct stat own = statOf(dir + "/" + std::to_string(::geteuid()));
  EXPECT_EQ(own.st_mode & 07777, 0755u);
  EXPECT_EQ(own.st_uid, ::geteuid());
  const json jobs = listed(dir);
  ASSERT_EQ(jobs.size(), 1u) << jobs.dump();
  EXPECT_EQ(jobs[0]["job"], "my job/1");
  EXPECT_EQ(jobs[0]["uid"], ::geteuid());
}

TEST(JobStatusTest, AFolderThatIsALinkIsRefused) {
  testing::TempDir tmp("dtrain-jobs-test");
  const std::string dir = tmp / "jobs";
  ASSERT_EQ(::mkdir(dir.c_str(), 0777), 0);
  ASSERT_EQ(::mkdir((tmp / "elsewhere").c_str(), 0777), 0);
  const std::string user_dir = dir + "/" + std::to_string(::geteuid());
  ASSERT_EQ(::symlink((tmp / "elsewhere").c_str(), user_dir.c_str()), 0);
  std::string why;
  EXPECT_FALSE(writeJobStatus(jobStatusPath(dir, "j"), statusOf("j"), &why));
  EXPECT_TRUE(contains(why, user_dir + " is not a directory")) << why;
  EXPECT_FALSE(testing::pathExists(tmp / "elsewhere/j.json"));
}

// A rank killed before it could remove its file: the lister drops the file
// and removes it, whether the rank died of SIGTERM or SIGKILL.
TEST(JobStatusTest, TheFileOfAKilledWriterIsDroppedAndRemoved) {
  testing::TempDir tmp("dtrain-jobs-test");
  const std::string dir = tmp / "jobs";
  for (int signal : {SIGTERM, SIGKILL}) {
    auto writer = startWriter(dir, "killed");
    ASSERT_EQ(firstReport(*writer), "written");
    ASSERT_EQ(listed(dir).size(), 1u) << "the live writer's job";
    writer->kill(signal);
    writer->reap();
    EXPECT_EQ(listed(dir).dump(), "[]") << "signal " << signal;
    EXPECT_FALSE(testing::pathExists(jobStatusPath(dir, "killed"))) << "signal " << signal;
  }
}

// A pid that a later process took: its start time tells it apart.
TEST(JobStatusTest, AReusedPidDoesNotKeepAFileListed) {
  testing::TempDir tmp("dtrain-jobs-test");
  const std::string dir = tmp / "jobs";
  const ProcessIdentity self = thisProcess();
  ASSERT_GT(self.start_time, 0u);
  json status = json::parse(statusOf("old"));
  status["start_time"] = self.start_time - 1;  // this pid, an earlier process
  ASSERT_TRUE(writeJobStatus(jobStatusPath(dir, "old"), status.dump()));
  ASSERT_TRUE(writeJobStatus(jobStatusPath(dir, "current"), statusOf("current")));
  const json jobs = listed(dir);
  ASSERT_EQ(jobs.size(), 1u) << jobs.dump();
  EXPECT_EQ(jobs[0]["job"], "current");
  EXPECT_FALSE(testing::pathExists(jobStatusPath(dir, "old")));
}

// Another PID namespace's pids mean nothing here: such a file stays listed.
TEST(JobStatusTest, AFileFromAnotherPidNamespaceIsKept) {
  testing::TempDir tmp("dtrain-jobs-test");
  const std::string dir = tmp / "jobs";
  json status = json::parse(statusOf("in a container"));
  status["pid"] = 999999999;
  status["pid_ns"] = "pid:[1]";
  ASSERT_TRUE(writeJobStatus(jobStatusPath(dir, "in a container"), status.dump()));
  EXPECT_EQ(listed(dir).size(), 1u);
}

TEST(JobStatusTest, AnotherUsersJobIsListedAndItsFolderIsItsOwn) {
  if (::geteuid() != 0) GTEST_SKIP() << "acting as another user needs root";
  testing::TempDir tmp("dtrain-jobs-test");
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0755), 0);
  const std::string dir = tmp / "jobs";
  ASSERT_TRUE(writeJobStatus(jobStatusPath(dir, "mine"), statusOf("mine")));
  auto other = startWriter(dir, "theirs", kOtherUser);
  ASSERT_EQ(firstReport(*other), "written");
  const json jobs = listed(dir);
  ASSERT_EQ(jobs.size(), 2u) << jobs.dump();
  EXPECT_EQ(jobs[1]["job"], "theirs");
  EXPECT_EQ(jobs[1]["uid"], kOtherUser);
  EXPECT_EQ(statOf(dir + "/" + std::to_string(kOtherUser)).st_uid, kOtherUser);

  // The other user cannot put a file into root's folder.
  ForkedChild intruder([&dir](const testing::ChildSide& side) {
    if (::setgid(kOtherUser) != 0 || ::setuid(kOtherUser) != 0) return 1;
    std::ofstream out(dir + "/0/mine.json");
    out << R"({"job":"forged"})";
    out.close();
    side.report(out ? "overwrote" : "refused");
    return 0;
  });
  EXPECT_EQ(firstReport(intruder), "refused");
  EXPECT_EQ(listed(dir)[0]["job"], "mine");
}

TEST(JobStatusTest, AFolderThisUserCannotReadIsNamedNotHidden) {
  if (::geteuid() != 0) GTEST_SKIP() << "acting as another user needs root";
  testing::TempDir tmp("dtrain-jobs-test");
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0755), 0);
  const std::string dir = tmp / "jobs";
  ASSERT_TRUE(writeJobStatus(jobStatusPath(dir, "private"), statusOf("private")));
  const std::string root_dir = dir + "/" + std::to_string(::geteuid());
  ASSERT_EQ(::chmod(root_dir.c_str(), 0700), 0);  // a umask of 077
  ForkedChild lister([&dir](const testing::ChildSide& side) {
    if (::setgid(kOtherUser) != 0 || ::setuid(kOtherUser) != 0) return 1;
    JobList list = listJobs(dir);
    std::string report = list.json + "\n";
    for (const auto& line : list.unreadable) report += line + "\n";
    side.report(report);
    return 0;
  });
  ASSERT_EQ(lister.reap(), 0);
  const std::string report = lister.readReport(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  EXPECT_TRUE(report.starts_with("[]\n")) << report;
  EXPECT_TRUE(contains(report, "cannot list " + root_dir + " (the jobs of uid 0): Permission denied")) << report;
}

TEST(JobStatusTest, AFolderNotOwnedByTheUidItIsNamedAfterIsSkippedAndNamed) {
  if (::geteuid() != 0) GTEST_SKIP() << "a folder of another owner needs root";
  testing::TempDir tmp("dtrain-jobs-test");
  const std::string dir = tmp / "jobs";
  ASSERT_TRUE(writeJobStatus(jobStatusPath(dir, "real"), statusOf("real")));
  const std::string fake_dir = dir + "/4242";
  ASSERT_EQ(::mkdir(fake_dir.c_str(), 0755), 0);
  std::ofstream(fake_dir + "/forged.json") << statusOf("forged");
  const JobList list = listJobs(dir);
  EXPECT_EQ(json::parse(list.json).size(), 1u) << list.json;
  ASSERT_EQ(list.unreadable.size(), 1u);
  EXPECT_EQ(list.unreadable[0],
            fake_dir + " belongs to uid 0, not to uid 4242 as its name says: its jobs are not listed");
}

}  // namespace
}  // namespace dtrain::metrics
