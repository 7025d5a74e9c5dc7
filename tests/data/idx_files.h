// Hand-made IDX files for the data tests: exact bytes, written raw or
// gzipped (one gzip member per call), so each test can break one field.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace dtrain::testing {

using Bytes = std::vector<uint8_t>;

inline void putBigEndian32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back((v >> shift) & 0xff);
}

inline Bytes idxHeader(uint32_t magic, const std::vector<uint32_t>& dims) {
  Bytes b;
  putBigEndian32(b, magic);
  for (uint32_t d : dims) putBigEndian32(b, d);
  return b;
}

// n images of h x w; pixel (i, p) = (i * 7 + p) % 256.
inline Bytes idxImages(uint32_t n, uint32_t h, uint32_t w) {
  Bytes b = idxHeader(0x00000803, {n, h, w});
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t p = 0; p < h * w; ++p) b.push_back((i * 7 + p) % 256);
  return b;
}

// n labels; label i = i % 10.
inline Bytes idxLabels(uint32_t n) {
  Bytes b = idxHeader(0x00000801, {n});
  for (uint32_t i = 0; i < n; ++i) b.push_back(i % 10);
  return b;
}

inline std::string writeFile(const std::string& path, const Bytes& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return path;
}

inline Bytes gzipped(const Bytes& bytes) {
  z_stream zs{};
  deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  Bytes out(deflateBound(&zs, bytes.size()));
  zs.next_in = const_cast<Bytef*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

inline Bytes operator+(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace dtrain::testing
