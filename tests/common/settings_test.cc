#include "common/settings.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/log.h"
#include "tests/support/text.h"

namespace dtrain {
namespace {

DTRAIN_SETTING(int64_t, kTestCount, "test-count", "DTRAIN_TEST_COUNT", 42, "A test setting.");
DTRAIN_SETTING(bool, kTestFlag, "test-flag", "DTRAIN_TEST_FLAG", false, "A test flag.");
std::string checkColour(const std::string& text) { return text == "red" || text == "blue" ? "" : "red or blue"; }
DTRAIN_SETTING_CHECKED(std::string, kTestColour, "test-colour", "DTRAIN_TEST_COLOUR", "red", "A checked setting.",
                       checkColour);
DTRAIN_SETTING(double, kTestSeconds, "test-seconds", "DTRAIN_TEST_SECONDS", 1.5, "A number.");

std::string checkError(const SettingBase& setting) {
  return testing::configErrorOf([&] {
    setting.reset();
    setting.check();
  });
}

TEST(SettingsTest, DefaultEnvAndCache) {
  ::unsetenv("DTRAIN_TEST_COUNT");
  kTestCount.reset();
  EXPECT_EQ(kTestCount.get(), 42);
  ::setenv("DTRAIN_TEST_COUNT", "7", 1);
  EXPECT_EQ(kTestCount.get(), 42) << "value is cached until reset()";
  kTestCount.reset();
  EXPECT_EQ(kTestCount.get(), 7);
  ::unsetenv("DTRAIN_TEST_COUNT");
  kTestCount.reset();
}

TEST(SettingsTest, BadValueNamesVariableAndType) {
  ::setenv("DTRAIN_TEST_FLAG", "maybe", 1);
  kTestFlag.reset();
  try {
    kTestFlag.get();
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("DTRAIN_TEST_FLAG='maybe' is not a boolean"), std::string::npos);
  }
  ::setenv("DTRAIN_TEST_FLAG", "yes", 1);
  kTestFlag.reset();
  EXPECT_TRUE(kTestFlag.get());
  ::unsetenv("DTRAIN_TEST_FLAG");
  kTestFlag.reset();
}

TEST(SettingsTest, RegistryListsEverySettingOnce) {
  int seen = 0;
  for (const SettingBase* s : allSettings()) {
    if (s->name() == "test-count") {
      ++seen;
      EXPECT_EQ(s->env(), "DTRAIN_TEST_COUNT");
      EXPECT_EQ(s->defaultText(), "42");
      EXPECT_EQ(s->typeName(), "integer");
    }
  }
  EXPECT_EQ(seen, 1);
  std::string md = settingsMarkdown();
  EXPECT_NE(md.find("| `test-count` | `DTRAIN_TEST_COUNT` | integer | `42` | A test setting. |"),
            std::string::npos) << md;
  EXPECT_NE(md.find("`DTRAIN_LOG_LEVEL`"), std::string::npos) << "the logger declares its level";
}

TEST(SettingsTest, ACheckedSettingRefusesWhatItsCheckRefuses) {
  ::setenv("DTRAIN_TEST_COLOUR", "green", 1);
  EXPECT_EQ(checkError(kTestColour), "DTRAIN_TEST_COLOUR='green' is refused; expected red or blue");
  ::setenv("DTRAIN_TEST_COLOUR", "blue", 1);
  EXPECT_EQ(checkError(kTestColour), "");
  EXPECT_EQ(kTestColour.get(), "blue");
  ::unsetenv("DTRAIN_TEST_COLOUR");
  kTestColour.reset();
}

TEST(SettingsTest, NumbersMustBeFinite) {
  for (const char* bad : {"nan", "inf", "-inf", "1e999"}) {
    ::setenv("DTRAIN_TEST_SECONDS", bad, 1);
    EXPECT_EQ(checkError(kTestSeconds), "DTRAIN_TEST_SECONDS='" + std::string(bad) + "' is not a finite number")
        << bad;
  }
  ::setenv("DTRAIN_TEST_SECONDS", "2.5", 1);
  EXPECT_EQ(checkError(kTestSeconds), "");
  ::unsetenv("DTRAIN_TEST_SECONDS");
  kTestSeconds.reset();
}

TEST(SettingsTest, CheckAllNamesTheFirstBadVariable) {
  ::setenv("DTRAIN_LOG_LEVEL", "bogus", 1);
  for (const SettingBase* s : allSettings()) s->reset();
  try {
    checkAllSettings();
    FAIL() << "DTRAIN_LOG_LEVEL=bogus was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.message(), "DTRAIN_LOG_LEVEL='bogus' is refused; expected one of debug, info, warn, error or off");
  }
  ::unsetenv("DTRAIN_LOG_LEVEL");
  for (const SettingBase* s : allSettings()) s->reset();
  EXPECT_NO_THROW(checkAllSettings());
}

TEST(LogTest, ParsesLevels) {
  EXPECT_EQ(parseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(parseLogLevel("warning"), LogLevel::kWarn);
  EXPECT_THROW(parseLogLevel("loud"), ConfigError);
}

}  // namespace
}  // namespace dtrain
