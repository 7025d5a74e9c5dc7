#include "common/units.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace dtrain {
namespace {

TEST(UnitsTest, ParsesNcclTestsSizes) {
  EXPECT_EQ(parseByteSize("8", "-b"), 8u);
  EXPECT_EQ(parseByteSize("512K", "-b"), 512u * 1024);
  EXPECT_EQ(parseByteSize("64m", "-b"), 64u << 20);
  EXPECT_EQ(parseByteSize("1G", "-e"), 1u << 30);
  EXPECT_EQ(parseByteSize("1GB", "-e"), 1u << 30);
}

TEST(UnitsTest, RejectsBadSizesNamingFlag) {
  for (const char* bad : {"12Q", "", "K", "-1", "1.5M", "1GG", "99999999999999999999"}) {
    try {
      parseByteSize(bad, "-b");
      FAIL() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(e.message().find("-b '" + std::string(bad) + "' is not a size"), std::string::npos)
          << e.message();
    }
  }
}

TEST(UnitsTest, FormatsSizes) {
  EXPECT_EQ(formatByteSize(8), "8");
  EXPECT_EQ(formatByteSize(1536), "1536");
  EXPECT_EQ(formatByteSize(65536), "64K");
  EXPECT_EQ(formatByteSize(1u << 30), "1G");
}

}  // namespace
}  // namespace dtrain
