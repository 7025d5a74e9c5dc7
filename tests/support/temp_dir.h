// Scratch folders for tests. POSIX calls only: libtorch 2.x wheels export a
// clashing copy of std::filesystem (see src/train/checkpoint.cc), and the
// training tests link this too.
#pragma once

#include <string>
#include <string_view>

namespace dtrain::testing {

// A fresh folder under $TMPDIR (else /tmp) named "<prefix>-XXXXXX", removed
// with everything in it when the TempDir is destroyed (unless keep()).
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "dtrain-test");
  ~TempDir();
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&&) = delete;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(std::string_view name) const { return path_ + "/" + std::string(name); }
  // Leaves the folder in place (to look at after a failure).
  void keep() { keep_ = true; }

 private:
  std::string path_;
  bool keep_ = false;
};

// A fresh folder like TempDir's that the caller owns (removeTree when done).
// Throws IoError naming the pattern when it cannot be made.
std::string makeTempDir(std::string_view prefix = "dtrain-test");

// rm -rf `path`; a missing path is not an error.
void removeTree(const std::string& path);

// True when `path` exists (lstat: a dangling link counts).
bool pathExists(const std::string& path);

}  // namespace dtrain::testing
