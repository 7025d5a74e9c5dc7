#include "tests/support/temp_dir.h"

#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <utility>

#include "common/host.h"

namespace dtrain::testing {

std::string makeTempDir(std::string_view prefix) { return makeTemporaryDirectory(std::string(prefix)); }

void removeTree(const std::string& path) {
  if (path.empty()) return;
  ::nftw(
      path.c_str(), [](const char* entry, const struct stat*, int, FTW*) { return ::remove(entry); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

bool pathExists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

TempDir::TempDir(std::string_view prefix) : path_(makeTempDir(prefix)) {}

TempDir::TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, {})), keep_(other.keep_) {}

TempDir::~TempDir() {
  if (!keep_) removeTree(path_);
}

}  // namespace dtrain::testing
