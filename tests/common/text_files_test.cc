// common/text.h and common/files.h: the small helpers every room shares.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <gtest/gtest.h>

#include "common/files.h"
#include "common/text.h"
#include "tests/support/temp_dir.h"

namespace dtrain {
namespace {

TEST(TextTest, TrimmedJoinedCountedAndNumbers) {
  EXPECT_EQ(trimmed(" \tx y \n"), "x y");
  EXPECT_EQ(trimmed(" \r\n\t"), "");
  EXPECT_EQ(joined({}), "");
  EXPECT_EQ(joined({"a", "b", "c"}), "a, b, c");
  EXPECT_EQ(joined({"a", "b"}, " | "), "a | b");
  EXPECT_EQ(counted(1, "GPU"), "1 GPU");
  EXPECT_EQ(counted(0, "GPU"), "0 GPUs");
  EXPECT_EQ(counted(2, "copy", "copies"), "2 copies");
  EXPECT_EQ(counted(1, "copy", "copies"), "1 copy");
  EXPECT_EQ(numberText(0.1), "0.1");
  EXPECT_EQ(numberText(1e-7), "1e-07");
  EXPECT_EQ(numberText(3), "3");
  EXPECT_EQ(secondsText(std::chrono::milliseconds(1500)), "1.5");
}

TEST(FilesTest, KindsOfPathsAndMakeDirectories) {
  testing::TempDir dir("dtrain-files-test");
  EXPECT_TRUE(isDirectory(dir.path()));
  EXPECT_FALSE(isRegularFile(dir.path()));
  const std::string file = dir.path() + "/f";
  const int fd = ::open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_TRUE(isRegularFile(file));
  EXPECT_FALSE(isDirectory(file));
  EXPECT_FALSE(isDirectory(dir.path() + "/missing"));
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_STREQ(fileKindName(st.st_mode), "a FIFO (named pipe)");
  ASSERT_EQ(::stat(dir.path().c_str(), &st), 0);
  EXPECT_STREQ(fileKindName(st.st_mode), "a directory");

  EXPECT_EQ(makeDirectories(dir.path() + "/a/b/c"), 0);
  EXPECT_TRUE(isDirectory(dir.path() + "/a/b/c"));
  EXPECT_EQ(makeDirectories(dir.path() + "/a/b/c"), 0);  // already there
  EXPECT_EQ(makeDirectories(file + "/below"), ENOTDIR);   // a file in the way
}

}  // namespace
}  // namespace dtrain
