// Helpers shared by the checkpoint tests: listing a folder and an
// independent CRC-32 to write files by the documented format. POSIX calls,
// not std::filesystem: PyTorch 2.x wheels export a clashing copy of it from
// libtorch.so (see src/train/checkpoint.cc).
#pragma once

#include <dirent.h>
#include <ftw.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "dtrain/checkpoint.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::testing {

// The names in dir, sorted, without "." and "..".
inline std::vector<std::string> namesIn(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* handle = ::opendir(dir.c_str())) {
    while (const dirent* entry = ::readdir(handle)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(handle);
  }
  std::sort(names.begin(), names.end());
  return names;
}

inline bool exists(const std::string& path) { return pathExists(path); }

// Bitwise CRC-32 (IEEE, as zlib's crc32), independent of the code under test.
inline uint32_t referenceCrc32(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

template <typename T>
void appendLittleEndian(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

inline std::string stepName(int64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "ckpt-%09lld.dtck", static_cast<long long>(step));
  return name;
}

}  // namespace dtrain::testing
