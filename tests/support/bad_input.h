// Table-driven bad command lines: each case is a name, the arguments and the
// text the error must hold; the command must exit 2 with that text.
//
//   class XBadInputTest : public ::testing::TestWithParam<BadCommandLine> {};
//   TEST_P(XBadInputTest, ExitsTwoWithAClearMessage) {
//     EXPECT_TRUE(exitsTwoSaying(runCommand(... + GetParam().args), GetParam().expected));
//   }
//   INSTANTIATE_TEST_SUITE_P(Cases, XBadInputTest, ::testing::Values(...), badCommandLineName);
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "tests/support/command.h"

namespace dtrain::testing {

struct BadCommandLine {
  const char* name;      // the test's name suffix
  std::string args;      // the bad arguments
  const char* expected;  // text the error message must hold
};

inline std::string badCommandLineName(const ::testing::TestParamInfo<BadCommandLine>& info) {
  return info.param.name;
}

// Success when the command exited 2 and its output holds `expected`.
inline ::testing::AssertionResult exitsTwoSaying(const CommandResult& r, const std::string& expected) {
  if (r.exit_code != 2) return ::testing::AssertionFailure() << "exit code " << r.exit_code << ", not 2:\n" << r.output;
  if (r.output.find(expected) == std::string::npos) {
    return ::testing::AssertionFailure() << "expected '" << expected << "' in:\n" << r.output;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace dtrain::testing
