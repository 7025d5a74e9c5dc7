// IDX files (the MNIST / Fashion-MNIST format), raw or gzipped.
//
// An IDX file is a big-endian header, magic 0x000008NN where NN is the
// number of dimensions (0x08 = unsigned byte data), then one big-endian
// uint32 per dimension, then the bytes. Gzip is detected by its magic
// (1f 8b), not by the file name.
//
// Errors: a missing or unreadable file -> IoError naming the file and the OS
// or zlib reason; a malformed one (bad magic, wrong size) -> ConfigError
// naming the file, what it holds and what was expected, e.g.
//   "t10k-images-idx3-ubyte has 1000 bytes; expected 7840016 for 10000
//    images of 28x28".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace dtrain::data {

// The file's bytes, decompressed when the file starts with the gzip magic.
std::vector<uint8_t> readMaybeGzipped(const std::string& path);

// An idx3-ubyte file (magic 0x00000803) -> uint8 [N, 1, H, W].
torch::Tensor loadIdxImages(const std::string& path);

// An idx1-ubyte file (magic 0x00000801) -> int64 [N].
torch::Tensor loadIdxLabels(const std::string& path);

// The train (train-*) or test (t10k-*) split found in dir:
// {train,t10k}-images-idx3-ubyte and {train,t10k}-labels-idx1-ubyte, each
// raw or with a .gz suffix (the raw file wins when both exist).
// ConfigError when a file is missing (naming dir and the names tried) or
// when images and labels disagree on N.
ImageDataset loadIdxSplit(const std::string& dir, bool train = true);

}  // namespace dtrain::data
