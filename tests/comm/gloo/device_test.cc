#include "comm/gloo/device.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include "common/settings.h"

namespace dtrain {
namespace {

// Settings cache their value: forget it whenever the environment changes.
void resetGlooSettings() {
  for (const SettingBase* setting : allSettings()) {
    if (setting->name().rfind("gloo-", 0) == 0) setting->reset();
  }
}

class GlooDeviceChoiceTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* name : {"DTRAIN_GLOO_IFACE", "DTRAIN_GLOO_HOSTNAME", "MASTER_ADDR"}) ::unsetenv(name);
    resetGlooSettings();
  }
  static void set(const char* name, const char* value) {
    ::setenv(name, value, 1);
    resetGlooSettings();
  }
};

TEST_F(GlooDeviceChoiceTest, LoopbackWithoutConfiguration) {
  const GlooDeviceChoice choice = chooseGlooDevice();
  EXPECT_EQ(choice.hostname, "127.0.0.1");
  EXPECT_TRUE(choice.iface.empty());
}

TEST_F(GlooDeviceChoiceTest, LocalMasterAddrRoutesOverLoopback) {
  set("MASTER_ADDR", "localhost");
  const GlooDeviceChoice choice = chooseGlooDevice();
  EXPECT_TRUE(choice.hostname == "127.0.0.1" || choice.hostname == "::1") << choice.hostname;
  EXPECT_NE(choice.describe().find("MASTER_ADDR=localhost"), std::string::npos) << choice.describe();
}

TEST_F(GlooDeviceChoiceTest, ExplicitSettingsWinInOrder) {
  set("MASTER_ADDR", "localhost");
  set("DTRAIN_GLOO_HOSTNAME", "10.1.2.3");
  EXPECT_EQ(chooseGlooDevice().hostname, "10.1.2.3");
  set("DTRAIN_GLOO_IFACE", "lo");
  const GlooDeviceChoice choice = chooseGlooDevice();
  EXPECT_EQ(choice.iface, "lo");
  EXPECT_EQ(choice.describe(), "interface lo (DTRAIN_GLOO_IFACE)");
}

TEST_F(GlooDeviceChoiceTest, UnroutableMasterFallsBackToLoopback) {
  set("MASTER_ADDR", "no-such-host.invalid");
  EXPECT_EQ(chooseGlooDevice().hostname, "127.0.0.1");
}

TEST(ScopedSigpipeBlockTest, BlocksInsideAndSwallowsARaisedSigpipe) {
  {
    ScopedSigpipeBlock block;
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, nullptr, &now);
    EXPECT_TRUE(sigismember(&now, SIGPIPE));
    // Would kill the test process if it were delivered on leaving the scope.
    pthread_kill(pthread_self(), SIGPIPE);
  }
  sigset_t after;
  pthread_sigmask(SIG_BLOCK, nullptr, &after);
  EXPECT_FALSE(sigismember(&after, SIGPIPE));
}

}  // namespace
}  // namespace dtrain
