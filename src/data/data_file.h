// A data set's file read as a stream of bytes: raw, or decompressed when it
// starts with the gzip magic (1f 8b), whatever its name.
//
// Only regular files are read (a symbolic link is followed): a FIFO blocks
// forever and a device such as /dev/zero never ends, so both are refused
// before a byte is read. A raw file's size is known up front, so a reader
// compares storedBytes() with what its header promises before reading on; a
// gzip stream's decompressed size is not, so a reader asks read() for no
// more than it expects, then atEnd() whether the data ends there. Nothing
// is ever decompressed beyond that one byte of excess.
//
// Errors, each naming the file as "<role> <path>":
//   cannot open or read              -> IoError with the errno text
//   not a regular file               -> ConfigError saying what it is
//   bytes after the last gzip member -> ConfigError (trailing junk)
//   a corrupt or cut gzip stream     -> IoError with zlib's reason
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/file_descriptor.h"

namespace dtrain::data {

class DataFile {
 public:
  // `role` names the file in messages: "images file", "CIFAR-10 batch".
  DataFile(std::string path, std::string role);
  ~DataFile();
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;

  const std::string& path() const { return path_; }
  // "<role> <path>", the way every message names the file.
  std::string name() const { return role_ + " " + path_; }
  bool gzipped() const { return gzip_ != nullptr; }
  // The file's size on disk.
  uint64_t storedBytes() const { return stored_bytes_; }
  // The most bytes read() can ever return: the size, or for gzip the most
  // deflate can expand it to (1032:1), so that a header promising more is
  // known to lie before anything that large is allocated.
  uint64_t maxBytes() const;

  // Reads up to n bytes into dst; fewer only at the end of the data.
  size_t read(void* dst, size_t n);
  // Reads and drops up to n bytes; returns how many there were.
  uint64_t skip(uint64_t n);
  // True when no byte is left (reads at most one more).
  bool atEnd();

 private:
  struct Gzip;

  size_t readStored(void* dst, size_t n);
  size_t readGzip(void* dst, size_t n);
  bool refillGzipInput(size_t keep);
  bool startNextGzipMember();

  std::string path_, role_;
  FileDescriptor fd_;
  uint64_t stored_bytes_ = 0;
  uint64_t stored_read_ = 0;
  std::unique_ptr<Gzip> gzip_;
};

// The whole file's bytes, raw or decompressed. ConfigError naming the file
// when it holds more than max_bytes (checked before reading a raw file; a
// gzip stream is decompressed no further than that).
std::vector<uint8_t> readDataFile(const std::string& path, const std::string& role, uint64_t max_bytes);

}  // namespace dtrain::data
