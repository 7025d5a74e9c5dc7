// IDX files (the MNIST / Fashion-MNIST format), raw or gzipped.
//
// An IDX file is a big-endian header, magic 0x000008NN where NN is the
// number of dimensions (0x08 = unsigned byte data), then one big-endian
// uint32 per dimension, then the bytes. Gzip is detected by its magic
// (1f 8b), not by the file name.
//
// The header is checked before the data is read, and the file against the
// header: only regular files, no zero or overflowing dimensions, exactly
// the bytes the dimensions promise (a raw file by its size before reading,
// a gzip stream decompressed no further than one byte past the promise),
// labels within the data set's classes.
//
// Errors (data/data_file.h for opening and decompressing): a malformed file
// -> ConfigError naming the role and file, the field or what it holds, and
// what was expected, e.g.
//   "images file t10k-images-idx3-ubyte has 1000 bytes; expected 7840016
//    for 10000 images of 28x28"
//   "labels file train-labels-idx1-ubyte: label 200 at index 3 is out of
//    range; expected 0..9 (the data set has 10 classes)"
#pragma once

#include <cstdint>
#include <string>

#include "data/dataset.h"

namespace dtrain::data {

// MNIST and Fashion-MNIST both have ten classes.
constexpr int64_t kIdxClasses = 10;

// An idx3-ubyte file (magic 0x00000803) -> uint8 [N, 1, H, W].
torch::Tensor loadIdxImages(const std::string& path);

// An idx1-ubyte file (magic 0x00000801) -> int64 [N], each in [0, classes).
torch::Tensor loadIdxLabels(const std::string& path, int64_t classes);

// The train (train-*) or test (t10k-*) split found in dir:
// {train,t10k}-images-idx3-ubyte and {train,t10k}-labels-idx1-ubyte, each
// raw or with a .gz suffix (the raw file wins when both exist).
// ConfigError when a file is missing (naming dir and the names tried), when
// images are not square (the models take square images) or when images and
// labels disagree on N (naming both files).
ImageDataset loadIdxSplit(const std::string& dir, bool train = true, int64_t classes = kIdxClasses);

}  // namespace dtrain::data
