#include "common/error.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include "common/env.h"

namespace dtrain {
namespace {

TEST(ErrorTest, CarriesKindSiteAndRank) {
  setThreadRank(7);
  try {
    throw CommError("peer went away");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kComm);
    EXPECT_EQ(e.rank(), 7);
    EXPECT_EQ(e.file(), "error_test.cc");
    EXPECT_GT(e.line(), 0);
    EXPECT_EQ(e.message(), "peer went away");
    std::string what = e.what();
    EXPECT_NE(what.find("CommError [rank 7, error_test.cc:"), std::string::npos) << what;
    EXPECT_NE(what.find("peer went away"), std::string::npos);
  }
  setThreadRank(-1);
}

TEST(ErrorTest, ErrnoMacroNamesCallAndErrno) {
  try {
    DTRAIN_CHECK_ERRNO(::open("/nonexistent/dtrain-test", O_RDONLY));
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    std::string msg = e.message();
    EXPECT_NE(msg.find("::open(\"/nonexistent/dtrain-test\", O_RDONLY) failed"), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file or directory (errno 2)"), std::string::npos) << msg;
  }
}

TEST(ErrorTest, ErrnoMacroPassesResultThrough) {
  int fd = DTRAIN_CHECK_ERRNO(::open("/dev/null", O_RDONLY));
  EXPECT_GE(fd, 0);
  ::close(fd);
}

TEST(EnvTest, BadIntegerNamesVariable) {
  ::setenv("DTRAIN_TEST_INT", "12x", 1);
  try {
    envInt("DTRAIN_TEST_INT", 0, 100);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.message(), "DTRAIN_TEST_INT='12x' is not an integer");
  }
  ::setenv("DTRAIN_TEST_INT", "500", 1);
  EXPECT_THROW(envInt("DTRAIN_TEST_INT", 0, 100), ConfigError);
  ::setenv("DTRAIN_TEST_INT", "50", 1);
  EXPECT_EQ(envInt("DTRAIN_TEST_INT", 0, 100).value(), 50);
  ::unsetenv("DTRAIN_TEST_INT");
  EXPECT_FALSE(envInt("DTRAIN_TEST_INT", 0, 100).has_value());
  EXPECT_THROW(requireEnv("DTRAIN_TEST_INT", "needed"), ConfigError);
}

}  // namespace
}  // namespace dtrain
