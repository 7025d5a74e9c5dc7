// Byte sizes as nccl-tests reads and prints them: "8", "512K", "64M", "1G"
// (binary multiples, case-insensitive suffix, optional trailing B).
#pragma once

#include <cstdint>
#include <string>

namespace dtrain {

// Throws ConfigError naming `what` (e.g. "-b") when `text` is not a size.
uint64_t parseByteSize(const std::string& text, const std::string& what);
// 1073741824 -> "1G", 1536 -> "1536", 65536 -> "64K".
std::string formatByteSize(uint64_t bytes);

}  // namespace dtrain
