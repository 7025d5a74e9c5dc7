#include "png_image.h"

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <utility>

namespace dtrain::testing {
namespace {

uint32_t bigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

uint8_t paeth(int a, int b, int c) {
  int p = a + b - c;
  int pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return static_cast<uint8_t>(a);
  return static_cast<uint8_t>(pb <= pc ? b : c);
}

std::vector<uint8_t> inflateAll(const std::vector<uint8_t>& compressed, size_t expected_size) {
  std::vector<uint8_t> out(expected_size);
  uLongf out_size = static_cast<uLongf>(out.size());
  int rc = uncompress(out.data(), &out_size, compressed.data(), static_cast<uLong>(compressed.size()));
  if (rc != Z_OK || out_size != out.size()) {
    throw std::runtime_error("PNG: zlib uncompress failed (" + std::to_string(rc) + ")");
  }
  return out;
}

}  // namespace

PngImage readPng(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (file.size() < 8 || !std::equal(kSignature, kSignature + 8, file.begin())) {
    throw std::runtime_error(path + ": not a PNG");
  }
  PngImage image;
  int channels = 0;
  std::vector<uint8_t> compressed;
  for (size_t pos = 8; pos + 12 <= file.size();) {
    uint32_t length = bigEndian32(&file[pos]);
    std::string type(reinterpret_cast<const char*>(&file[pos + 4]), 4);
    const uint8_t* data = &file[pos + 8];
    if (pos + 12 + length > file.size()) throw std::runtime_error(path + ": truncated chunk " + type);
    if (type == "IHDR") {
      image.width = static_cast<int>(bigEndian32(data));
      image.height = static_cast<int>(bigEndian32(data + 4));
      int bit_depth = data[8], colour_type = data[9], interlace = data[12];
      if (bit_depth != 8 || (colour_type != 2 && colour_type != 6) || interlace != 0) {
        throw std::runtime_error(path + ": only 8-bit RGB/RGBA non-interlaced PNGs are supported");
      }
      channels = colour_type == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      compressed.insert(compressed.end(), data, data + length);
    } else if (type == "IEND") {
      break;
    }
    pos += 12 + length;
  }
  if (channels == 0) throw std::runtime_error(path + ": no IHDR");
  const size_t stride = static_cast<size_t>(image.width) * channels;
  std::vector<uint8_t> raw = inflateAll(compressed, (stride + 1) * image.height);
  std::vector<uint8_t> previous(stride, 0), current(stride);
  image.pixels.resize(static_cast<size_t>(image.width) * image.height);
  for (int y = 0; y < image.height; ++y) {
    const uint8_t* line = &raw[y * (stride + 1)];
    uint8_t filter = line[0];
    for (size_t i = 0; i < stride; ++i) {
      int a = i >= static_cast<size_t>(channels) ? current[i - channels] : 0;
      int b = previous[i];
      int c = i >= static_cast<size_t>(channels) ? previous[i - channels] : 0;
      int predictor = 0;
      switch (filter) {
        case 0: break;
        case 1: predictor = a; break;
        case 2: predictor = b; break;
        case 3: predictor = (a + b) / 2; break;
        case 4: predictor = paeth(a, b, c); break;
        default: throw std::runtime_error(path + ": bad PNG filter " + std::to_string(filter));
      }
      current[i] = static_cast<uint8_t>(line[1 + i] + predictor);
    }
    for (int x = 0; x < image.width; ++x) {
      const uint8_t* p = &current[static_cast<size_t>(x) * channels];
      image.pixels[static_cast<size_t>(y) * image.width + x] = {p[0], p[1], p[2]};
    }
    std::swap(previous, current);
  }
  return image;
}

}  // namespace dtrain::testing
