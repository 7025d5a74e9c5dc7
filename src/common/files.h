// What a path names, asked of the file system (stat, following links).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>

#include "common/file_descriptor.h"

namespace dtrain {

// True when `path` names a directory (false when it does not exist).
bool isDirectory(const std::string& path);

// True when `path` names a regular file (not a directory, FIFO or device).
bool isRegularFile(const std::string& path);

// What a file of `mode` (stat's st_mode) is, for a message: "a directory",
// "a FIFO (named pipe)", "a character device", "a block device", "a socket",
// "a regular file", else "not a regular file".
const char* fileKindName(mode_t mode);

// Opens `path` for reading without ever blocking in open(): opened with
// O_NONBLOCK (a FIFO would otherwise wait for a writer forever), then
// refused unless it is a regular file — ConfigError "<what> PATH is a FIFO
// (named pipe); expected a regular file" (a directory, a device, a
// socket likewise) — and O_NONBLOCK cleared. A path that does not open is
// an IoError "cannot open <what> PATH: open() failed: <reason>". `st`,
// when given, receives its fstat.
FileDescriptor openRegularFile(const std::string& path, const std::string& what, struct stat* st = nullptr);

// The whole of a regular file (openRegularFile's refusals; IoError when a
// read fails).
std::string readRegularFile(const std::string& path, const std::string& what);

// Why `mkdir -p dir` cannot succeed as far as the file system says now:
// "" when `dir` is a directory or could be made one, else a phrase naming
// the part in the way ("'/a/b' is a regular file").
std::string directoryBlocker(const std::string& dir);

// mkdir -p (POSIX calls, no std::filesystem: PyTorch's 2.x wheels export a
// clashing copy of it): 0, or the errno of the step that failed (ENOTDIR
// when a part exists as something else than a directory).
int makeDirectories(const std::string& dir);

}  // namespace dtrain
