#include "data/idx_dataset.h"

#include <cstdio>
#include <filesystem>
#include <limits>
#include <vector>

#include "common/error.h"
#include "data/data_file.h"

namespace dtrain::data {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;

uint32_t readBigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// Checks the magic and reads the dimensions that follow it.
std::vector<int64_t> readHeader(DataFile& file, uint32_t magic, const char* kind) {
  const size_t ndim = magic & 0xff;
  uint8_t header[4 + 4 * 3];
  size_t got = file.read(header, 4);
  if (got < 4) {
    throw ConfigError(file.name() + " has " + std::to_string(got) + " bytes; expected an IDX " + kind +
                      " file (magic " + hex32(magic) + ")");
  }
  const uint32_t found = readBigEndian32(header);
  if (found != magic) {
    throw ConfigError(file.name() + " has magic " + hex32(found) + "; expected " + hex32(magic) + " for an IDX " +
                      kind + " file");
  }
  got += file.read(header + 4, 4 * ndim);
  if (got < 4 + 4 * ndim) {
    throw ConfigError(file.name() + " has " + std::to_string(got) + " bytes; expected at least " +
                      std::to_string(4 + 4 * ndim) + " for the IDX " + kind + " header");
  }
  std::vector<int64_t> dims;
  for (size_t i = 0; i < ndim; ++i) dims.push_back(readBigEndian32(header + 4 + 4 * i));
  return dims;
}

// The payload's size in bytes: the product of dims, named by `fields` in
// errors. A zero count would train on nothing, and a product that wraps
// could match a small file's size.
int64_t payloadBytes(const DataFile& file, const std::vector<int64_t>& dims, const std::vector<const char*>& fields,
                     const std::string& contents) {
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0) {
      throw ConfigError(file.name() + ": header says 0 " + fields[i] + "; expected at least 1");
    }
  }
  int64_t product = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(product, d, &product) || product > std::numeric_limits<int64_t>::max() - 16) {
      throw ConfigError(file.name() + ": header says " + contents +
                        ": the dimension product overflows (more than 2^63 bytes)");
    }
  }
  return product;
}

// Reads exactly the bytes the header promised, as a uint8 tensor of
// `shape`; a raw file's size is compared before anything is allocated or
// read, and a gzip stream is never decompressed further than one byte past.
torch::Tensor readPayload(DataFile& file, int64_t header, std::vector<int64_t> shape, int64_t payload,
                          const std::string& contents) {
  const uint64_t expected = static_cast<uint64_t>(header + payload);
  auto sizeError = [&](const std::string& has) {
    return ConfigError(file.name() + " has " + has + " bytes; expected " + std::to_string(expected) + " for " +
                       contents + (file.gzipped() ? " (sizes after gunzip)" : ""));
  };
  if (!file.gzipped() && file.storedBytes() != expected) throw sizeError(std::to_string(file.storedBytes()));
  if (file.gzipped() && file.maxBytes() < expected) {
    throw sizeError(std::to_string(header + static_cast<int64_t>(file.skip(static_cast<uint64_t>(payload)))));
  }
  torch::Tensor t;
  try {
    t = torch::empty(shape, torch::kUInt8);
  } catch (const c10::Error&) {
    throw IoError("cannot allocate " + std::to_string(payload) + " bytes for " + file.name() + " (" + contents + ")");
  }
  auto* out = t.data_ptr<uint8_t>();
  size_t got = 0;
  while (got < static_cast<size_t>(payload)) {
    const size_t n = file.read(out + got, static_cast<size_t>(payload) - got);
    if (n == 0) throw sizeError(std::to_string(header + static_cast<int64_t>(got)));
    got += n;
  }
  if (!file.atEnd()) throw sizeError("more than " + std::to_string(expected));
  return t;
}

std::string findSplitFile(const std::string& dir, const std::string& name, std::vector<std::string>& tried) {
  for (const std::string& candidate : {name, name + ".gz"}) {
    std::filesystem::path p = std::filesystem::path(dir) / candidate;
    if (std::filesystem::exists(p)) return p.string();
    tried.push_back(candidate);
  }
  return "";
}

}  // namespace

torch::Tensor loadIdxImages(const std::string& path) {
  DataFile file(path, "images file");
  const std::vector<int64_t> dims = readHeader(file, kImagesMagic, "images");
  const int64_t n = dims[0], h = dims[1], w = dims[2];
  const std::string contents =
      std::to_string(n) + " images of " + std::to_string(h) + "x" + std::to_string(w);
  const int64_t payload = payloadBytes(file, dims, {"images", "rows", "cols"}, contents);
  return readPayload(file, 16, {n, 1, h, w}, payload, contents);
}

torch::Tensor loadIdxLabels(const std::string& path, int64_t classes) {
  DataFile file(path, "labels file");
  const std::vector<int64_t> dims = readHeader(file, kLabelsMagic, "labels");
  const std::string contents = std::to_string(dims[0]) + " labels";
  const int64_t n = payloadBytes(file, dims, {"labels"}, contents);
  torch::Tensor bytes = readPayload(file, 8, {n}, n, contents);
  const uint8_t* label = bytes.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    // A label past the classes would otherwise size the model (the labels
    // used to decide it) or crash the loss.
    if (label[i] >= classes) {
      throw ConfigError(file.name() + ": label " + std::to_string(label[i]) + " at index " + std::to_string(i) +
                        " is out of range; expected 0.." + std::to_string(classes - 1) + " (the data set has " +
                        std::to_string(classes) + " classes)");
    }
  }
  return bytes.to(torch::kLong);
}

ImageDataset loadIdxSplit(const std::string& dir, bool train, int64_t classes) {
  const std::string prefix = train ? "train" : "t10k";
  std::vector<std::string> tried;
  std::string images = findSplitFile(dir, prefix + "-images-idx3-ubyte", tried);
  std::string labels = findSplitFile(dir, prefix + "-labels-idx1-ubyte", tried);
  if (images.empty() || labels.empty()) {
    std::string names;
    for (const auto& t : tried) names += (names.empty() ? "" : ", ") + t;
    throw ConfigError("IDX " + prefix + " split not found in " + dir + ": expected " + names);
  }
  ImageDataset ds;
  ds.images = loadIdxImages(images);
  if (ds.images.size(2) != ds.images.size(3)) {
    throw ConfigError("images file " + images + ": rows " + std::to_string(ds.images.size(2)) + " x cols " +
                      std::to_string(ds.images.size(3)) + ": images must be square (the models take square images)");
  }
  ds.labels = loadIdxLabels(labels, classes);
  if (ds.images.size(0) != ds.labels.size(0)) {
    throw ConfigError("images file " + images + " has " + std::to_string(ds.images.size(0)) +
                      " images but labels file " + labels + " has " + std::to_string(ds.labels.size(0)) +
                      " labels; expected the same count");
  }
  return ds;
}

}  // namespace dtrain::data
