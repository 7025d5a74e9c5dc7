#include "data/idx_dataset.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/error.h"

namespace dtrain::data {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;

uint32_t readBigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

std::vector<uint8_t> readRaw(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw errnoError("fopen", errno, "cannot open " + path);
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), f.get())) > 0) {
    bytes.insert(bytes.end(), chunk, chunk + n);
  }
  if (std::ferror(f.get())) throw errnoError("fread", errno, "cannot read " + path);
  return bytes;
}

// zlib's gzerror text, without the "<path>: " prefix it adds itself.
std::string gzipError(gzFile gz, const std::string& path, size_t bytes_read) {
  int code = 0;
  const char* msg = gzerror(gz, &code);
  std::string text = msg ? msg : "unknown zlib error";
  if (text.rfind(path + ": ", 0) == 0) text.erase(0, path.size() + 2);
  return "cannot decompress " + path + " (gzip): " + text + " after " + std::to_string(bytes_read) +
         " bytes";
}

std::vector<uint8_t> readGzip(const std::string& path) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> gz(gzopen(path.c_str(), "rb"), &gzclose);
  if (!gz) throw errnoError("gzopen", errno, "cannot open " + path);
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    int n = gzread(gz.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) throw IoError(gzipError(gz.get(), path, bytes.size()));
    if (n == 0) break;
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + n);
  }
  // A gzip stream cut short reads as a clean EOF on some zlib versions; the
  // error is only reported through gzerror.
  int code = 0;
  gzerror(gz.get(), &code);
  if (code != Z_OK && code != Z_STREAM_END) throw IoError(gzipError(gz.get(), path, bytes.size()));
  return bytes;
}

// Checks the magic and the dimension count; returns the dims.
std::vector<int64_t> parseHeader(const std::string& path, const std::vector<uint8_t>& bytes,
                                 uint32_t magic, const char* kind) {
  const size_t ndim = magic & 0xff;
  const size_t header = 4 + 4 * ndim;
  if (bytes.size() < 4) {
    throw ConfigError(path + " has " + std::to_string(bytes.size()) +
                      " bytes; expected an IDX " + kind + " file (magic " + hex32(magic) + ")");
  }
  uint32_t got = readBigEndian32(bytes.data());
  if (got != magic) {
    throw ConfigError(path + " has magic " + hex32(got) + "; expected " + hex32(magic) +
                      " for an IDX " + kind + " file");
  }
  if (bytes.size() < header) {
    throw ConfigError(path + " has " + std::to_string(bytes.size()) + " bytes; expected at least " +
                      std::to_string(header) + " for the IDX " + kind + " header");
  }
  std::vector<int64_t> dims;
  for (size_t i = 0; i < ndim; ++i) dims.push_back(readBigEndian32(bytes.data() + 4 + 4 * i));
  return dims;
}

// Copies the payload after the header into a new tensor (the byte vector dies).
torch::Tensor payloadTensor(const std::vector<uint8_t>& bytes, size_t header,
                            std::vector<int64_t> shape) {
  auto t = torch::empty(shape, torch::kUInt8);
  std::memcpy(t.data_ptr<uint8_t>(), bytes.data() + header, bytes.size() - header);
  return t;
}

std::string findSplitFile(const std::string& dir, const std::string& name,
                          std::vector<std::string>& tried) {
  for (const std::string& candidate : {name, name + ".gz"}) {
    std::filesystem::path p = std::filesystem::path(dir) / candidate;
    if (std::filesystem::exists(p)) return p.string();
    tried.push_back(candidate);
  }
  return "";
}

}  // namespace

std::vector<uint8_t> readMaybeGzipped(const std::string& path) {
  uint8_t magic[2] = {0, 0};
  {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!f) throw errnoError("fopen", errno, "cannot open " + path);
    if (std::fread(magic, 1, 2, f.get()) != 2) magic[0] = magic[1] = 0;
  }
  return (magic[0] == 0x1f && magic[1] == 0x8b) ? readGzip(path) : readRaw(path);
}

torch::Tensor loadIdxImages(const std::string& path) {
  auto bytes = readMaybeGzipped(path);
  auto dims = parseHeader(path, bytes, kImagesMagic, "images");
  const int64_t n = dims[0], h = dims[1], w = dims[2];
  const size_t expected = 16 + static_cast<size_t>(n) * h * w;
  if (bytes.size() != expected) {
    throw ConfigError(path + " has " + std::to_string(bytes.size()) + " bytes; expected " +
                      std::to_string(expected) + " for " + std::to_string(n) + " images of " +
                      std::to_string(h) + "x" + std::to_string(w));
  }
  return payloadTensor(bytes, 16, {n, 1, h, w});
}

torch::Tensor loadIdxLabels(const std::string& path) {
  auto bytes = readMaybeGzipped(path);
  auto dims = parseHeader(path, bytes, kLabelsMagic, "labels");
  const int64_t n = dims[0];
  const size_t expected = 8 + static_cast<size_t>(n);
  if (bytes.size() != expected) {
    throw ConfigError(path + " has " + std::to_string(bytes.size()) + " bytes; expected " +
                      std::to_string(expected) + " for " + std::to_string(n) + " labels");
  }
  return payloadTensor(bytes, 8, {n}).to(torch::kLong);
}

ImageDataset loadIdxSplit(const std::string& dir, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  std::vector<std::string> tried;
  std::string images = findSplitFile(dir, prefix + "-images-idx3-ubyte", tried);
  std::string labels = findSplitFile(dir, prefix + "-labels-idx1-ubyte", tried);
  if (images.empty() || labels.empty()) {
    std::string names;
    for (const auto& t : tried) names += (names.empty() ? "" : ", ") + t;
    throw ConfigError("IDX " + prefix + " split not found in " + dir + ": expected " + names);
  }
  ImageDataset ds{loadIdxImages(images), loadIdxLabels(labels)};
  if (ds.images.size(0) != ds.labels.size(0)) {
    throw ConfigError(images + " has " + std::to_string(ds.images.size(0)) + " images but " +
                      labels + " has " + std::to_string(ds.labels.size(0)) +
                      " labels; expected the same count");
  }
  return ds;
}

}  // namespace dtrain::data
