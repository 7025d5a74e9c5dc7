// storeTokenFromEnvironment(): DTRAIN_STORE_TOKEN, else DTRAIN_STORE_TOKEN_FILE.
#include <gtest/gtest.h>
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
