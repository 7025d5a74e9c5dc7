// CIFAR-10 binary version (cifar-10-batches-bin).
//
// A batch file is a sequence of 3073-byte records: 1 label byte (0..9), then
// 3072 pixel bytes, channel-major (1024 R, 1024 G, 1024 B, each 32x32
// row-major), so a record maps to [3, 32, 32] without reordering.
//
// Errors: missing or unreadable file -> IoError naming it; not a regular
// file, more than kCifarMaxBatchBytes (raw or after gunzip), a size that is
// not a positive multiple of 3073 or a label above 9 -> ConfigError naming
// the file, what it holds and what was expected (data/data_file.h).
#pragma once

#include <string>

#include "data/dataset.h"

namespace dtrain::data {

constexpr int64_t kCifarRecordBytes = 1 + 3 * 32 * 32;
constexpr int64_t kCifarClasses = 10;
// The whole data set (60,000 records) in one file; a real batch holds 10,000.
constexpr int64_t kCifarMaxBatchBytes = 60000 * kCifarRecordBytes;

// One batch file -> images uint8 [N, 3, 32, 32], labels int64 [N].
ImageDataset loadCifarBatch(const std::string& path);

// train: data_batch_1.bin .. data_batch_5.bin concatenated in that order;
// test: test_batch.bin. Looks in dir, or in dir/cifar-10-batches-bin when
// dir holds the extracted archive. ConfigError naming dir and the missing
// file when one is absent.
ImageDataset loadCifarSplit(const std::string& dir, bool train = true);

}  // namespace dtrain::data
