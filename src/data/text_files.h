// The text files a tokenizer reads: checked up front, read whole, and
// refused with the byte offset when they are not UTF-8 (torch-free; library
// dtrain_text).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::data {

struct InputFile {
  std::string path;
  int64_t bytes = 0;
};

// Each path with its size, before any work starts. ConfigError naming the
// first path that does not exist, cannot be opened for reading (with the OS's
// reason) or is not a regular file (a directory, a device, a FIFO).
std::vector<InputFile> checkInputFiles(const std::vector<std::string>& paths);

// The whole file. ConfigError for what checkInputFiles() refuses; IoError
// naming the path when reading fails.
std::string readFileBytes(const std::string& path);

// ConfigError "<path>: not UTF-8 text: invalid byte 0xFF at byte offset N"
// when `text` (the content of `path`) is not well-formed UTF-8.
void requireUtf8(std::string_view text, const std::string& path);

}  // namespace dtrain::data
