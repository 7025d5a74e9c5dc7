// storeTokenFromEnvironment(): DTRAIN_STORE_TOKEN, else DTRAIN_STORE_TOKEN_FILE.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "common/error.h"
#include "common/settings.h"
#include "store/tcp_store.h"

namespace dtrain {
namespace {

class StoreTokenTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override {
    clear();
    if (!file_.empty()) std::remove(file_.c_str());
  }
  static void clear() {
    ::unsetenv("DTRAIN_STORE_TOKEN");
    ::unsetenv("DTRAIN_STORE_TOKEN_FILE");
  }
  std::string writeFile(const std::string& contents) {
    file_ = ::testing::TempDir() + "store_token_" + std::to_string(getpid());
    std::ofstream(file_, std::ios::binary) << contents;
    return file_;
  }
  std::string file_;
};

TEST_F(StoreTokenTest, NothingSetMeansNoToken) { EXPECT_EQ(storeTokenFromEnvironment(), ""); }

TEST_F(StoreTokenTest, TheVariableWins) {
  ::setenv("DTRAIN_STORE_TOKEN_FILE", writeFile("from-file\n").c_str(), 1);
  ::setenv("DTRAIN_STORE_TOKEN", "from-env", 1);
  EXPECT_EQ(storeTokenFromEnvironment(), "from-env");
}

TEST_F(StoreTokenTest, TheFileIsReadWithoutItsTrailingNewline) {
  ::setenv("DTRAIN_STORE_TOKEN_FILE", writeFile("t0ken with spaces\n").c_str(), 1);
  EXPECT_EQ(storeTokenFromEnvironment(), "t0ken with spaces");
}

TEST_F(StoreTokenTest, AnUnreadableFileIsAnIoErrorNamingIt) {
  ::setenv("DTRAIN_STORE_TOKEN_FILE", "/nonexistent-dir/token", 1);
  try {
    storeTokenFromEnvironment();
    FAIL() << "read a file that does not exist";
  } catch (const IoError& e) {
    EXPECT_NE(e.message().find("'/nonexistent-dir/token'"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("No such file"), std::string::npos) << e.message();
  }
}

// A named file that yields no token must not turn authentication off.
TEST_F(StoreTokenTest, ADirectoryAnEmptyFileOrAFifoIsAnErrorNamingThePath) {
  const std::string dir = ::testing::TempDir() + "store_token_dir_" + std::to_string(getpid());
  ::mkdir(dir.c_str(), 0700);
  auto errorFor = [](const std::string& path) -> std::string {
    ::setenv("DTRAIN_STORE_TOKEN_FILE", path.c_str(), 1);
    try {
      storeTokenFromEnvironment();
    } catch (const ConfigError& e) {
      return e.message();
    }
    return "no error";
  };
  EXPECT_EQ(errorFor(dir), "the store token file '" + dir +
                               "' (DTRAIN_STORE_TOKEN_FILE) is a directory; expected a regular file holding the token");
  const std::string empty = writeFile("\n");
  EXPECT_NE(errorFor(empty).find("'" + empty + "' (DTRAIN_STORE_TOKEN_FILE) is empty"), std::string::npos);
  std::remove(empty.c_str());
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(errorFor(fifo).find("is not a regular file"), std::string::npos);  // and did not block
  std::remove(fifo.c_str());
  ::rmdir(dir.c_str());
}

TEST_F(StoreTokenTest, BothVariablesAreInTheSettingsRegistry) {
  int found = 0;
  for (const SettingBase* s : allSettings()) {
    if (s->env() == "DTRAIN_STORE_TOKEN" || s->env() == "DTRAIN_STORE_TOKEN_FILE") {
      ++found;
      EXPECT_FALSE(s->help().empty());
    }
  }
  EXPECT_EQ(found, 2);
}

}  // namespace
}  // namespace dtrain
