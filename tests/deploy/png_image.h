// Decodes the PNGs a headless browser writes (8-bit RGB or RGBA, not
// interlaced), so a test can look at the pixels of a screenshot.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::testing {

struct Rgb {
  uint8_t r, g, b;
};

struct PngImage {
  int width = 0;
  int height = 0;
  std::vector<Rgb> pixels;  // row-major, alpha dropped

  const Rgb& at(int x, int y) const { return pixels[static_cast<size_t>(y) * width + x]; }
};

// Throws std::runtime_error naming what it cannot decode.
PngImage readPng(const std::string& path);

}  // namespace dtrain::testing
