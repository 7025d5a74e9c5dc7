// What a path names, asked of the file system (stat, following links).
#pragma once

#include <sys/types.h>

#include <string>

namespace dtrain {

// True when `path` names a directory (false when it does not exist).
bool isDirectory(const std::string& path);

// True when `path` names a regular file (not a directory, FIFO or device).
bool isRegularFile(const std::string& path);

// What a file of `mode` (stat's st_mode) is, for a message: "a directory",
// "a FIFO (named pipe)", "a character device", "a block device", "a socket",
// "a regular file", else "not a regular file".
const char* fileKindName(mode_t mode);

// mkdir -p (POSIX calls, no std::filesystem: PyTorch's 2.x wheels export a
// clashing copy of it): 0, or the errno of the step that failed (ENOTDIR
// when a part exists as something else than a directory).
int makeDirectories(const std::string& dir);

}  // namespace dtrain
