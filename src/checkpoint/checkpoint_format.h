// The byte layout of one checkpoint file (dtrain/checkpoint.h documents
// it), shared by its torch-free reader (checkpoint_file.cc) and its writer
// of tensors (checkpoint_file_writer.cc): the magics, the preamble and
// trailer sizes, the CRC, and a file writer that sums the CRC of what it
// writes. (private to checkpoint/)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dtrain::checkpoint_format {

inline constexpr char kMagic[8] = {'D', 'T', 'R', 'A', 'I', 'N', 'C', 'K'};
inline constexpr char kEndMagic[8] = {'D', 'T', 'C', 'K', 'E', 'N', 'D', '\0'};
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint64_t kPreambleBytes = 8 + 4 + 8;  // magic, version, header length
inline constexpr uint64_t kTrailerBytes = 8 + 4 + 8;   // payload length, crc, end magic
inline constexpr size_t kIoChunk = size_t{8} << 20;

uint32_t crcStart();
// zlib's CRC-32 of `size` more bytes.
uint32_t crcUpdate(uint32_t crc, const void* data, uint64_t size);

// Buffers small writes, passes large ones straight through, and keeps the
// CRC of everything written. IoError (naming `what`) when a write fails.
class CrcFileWriter {
 public:
  CrcFileWriter(int fd, const std::string& what);
  void write(const void* data, size_t size);
  void flush();
  uint32_t crc() const { return crc_; }
  uint64_t written() const { return written_; }

 private:
  void writeAll(const char* data, size_t size);
  int fd_;
  std::string what_;
  std::string buffer_;
  uint32_t crc_;
  uint64_t written_ = 0;
};

// fsync of a directory (a file system that cannot is tolerated); IoError naming `what`.
void fsyncDir(const std::string& dir, const std::string& what);
// The directory part of a path ("." for a bare name).
std::string directoryOf(const std::string& path);

}  // namespace dtrain::checkpoint_format
