#include "kernel_test_util.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>

namespace dtrain::kernels::testing {

std::string gpu_unavailable_reason() {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(rc);
  if (n == 0) return "cudaGetDeviceCount returned 0 devices";
  return "";
}

uint16_t float_to_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if (std::isnan(v)) return 0x7fc0;
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float bf16_to_float(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float round_to(DType t, float v) { return t == DType::kFloat32 ? v : bf16_to_float(float_to_bf16(v)); }

std::vector<float> random_values(size_t n, uint32_t seed, DType t, float scale, float offset) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> out(n);
  for (auto& v : out) v = round_to(t, offset + scale * dist(gen));
  return out;
}

namespace {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(rc));
}

std::vector<uint8_t> encode(const std::vector<float>& values, DType t) {
  std::vector<uint8_t> out(values.size() * dtype_size(t));
  for (size_t i = 0; i < values.size(); ++i) {
    if (t == DType::kFloat32) {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t b = float_to_bf16(values[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}

}  // namespace

DeviceTensor::DeviceTensor(size_t count, DType dtype, size_t pad_bytes)
    : count_(count), alloc_bytes_(count * dtype_size(dtype) + pad_bytes), dtype_(dtype) {
  check(cudaMalloc(&ptr_, std::max<size_t>(alloc_bytes_, 16)), "cudaMalloc");
  fill_nan();
}

DeviceTensor::DeviceTensor(const std::vector<float>& values, DType dtype, size_t pad_bytes)
    : DeviceTensor(values.size(), dtype, pad_bytes) {
  upload(values);
}

DeviceTensor::~DeviceTensor() {
  if (ptr_) cudaFree(ptr_);
}

DeviceTensor::DeviceTensor(DeviceTensor&& o) noexcept { *this = std::move(o); }

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(count_, o.count_);
  std::swap(alloc_bytes_, o.alloc_bytes_);
  std::swap(dtype_, o.dtype_);
  return *this;
}

void DeviceTensor::upload(const std::vector<float>& values, size_t offset_elems) {
  const auto b = encode(values, dtype_);
  check(cudaMemcpy(static_cast<uint8_t*>(ptr_) + offset_elems * dtype_size(dtype_), b.data(), b.size(),
                   cudaMemcpyHostToDevice),
        "cudaMemcpy H2D");
}

std::vector<float> DeviceTensor::download(size_t offset_elems, size_t count) const {
  if (count == SIZE_MAX) count = count_ - offset_elems;
  const size_t es = dtype_size(dtype_);
  std::vector<uint8_t> b(count * es);
  check(cudaMemcpy(b.data(), static_cast<uint8_t*>(ptr_) + offset_elems * es, b.size(), cudaMemcpyDeviceToHost),
        "cudaMemcpy D2H");
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    if (dtype_ == DType::kFloat32) {
      std::memcpy(&out[i], b.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      out[i] = bf16_to_float(h);
    }
  }
  return out;
}

std::vector<uint8_t> DeviceTensor::bytes() const {
  std::vector<uint8_t> b(alloc_bytes_);
  check(cudaMemcpy(b.data(), ptr_, b.size(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return b;
}

void DeviceTensor::fill_nan() {
  // 0xFF bytes are a NaN in both fp32 and bf16.
  check(cudaMemset(ptr_, 0xff, std::max<size_t>(alloc_bytes_, 16)), "cudaMemset");
}

DeviceAmax::DeviceAmax() {
  check(cudaMalloc(reinterpret_cast<void**>(&ptr_), sizeof(uint32_t)), "cudaMalloc");
  check(cudaMemset(ptr_, 0, sizeof(uint32_t)), "cudaMemset");
}

DeviceAmax::~DeviceAmax() {
  if (ptr_) cudaFree(ptr_);
}

uint32_t DeviceAmax::bits() const {
  uint32_t b = 0;
  check(cudaMemcpy(&b, ptr_, sizeof(b), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return b;
}

uint32_t amax_bits_of(const std::vector<float>& values) {
  uint32_t m = 0;
  for (float v : values) {
    uint32_t b = 0;
    std::memcpy(&b, &v, sizeof(b));
    m = std::max(m, b & 0x7fffffffu);
  }
  return m;
}

::testing::AssertionResult same_amax(uint32_t got, uint32_t want) {
  constexpr uint32_t kInf = 0x7f800000u;
  if (got == want || (got > kInf && want > kInf)) return ::testing::AssertionSuccess();
  float g = 0, w = 0;
  std::memcpy(&g, &got, sizeof(g));
  std::memcpy(&w, &want, sizeof(w));
  return ::testing::AssertionFailure() << "amax bits 0x" << std::hex << got << " (" << g << "), want 0x" << want
                                       << " (" << w << ")";
}

DeviceBytes::DeviceBytes(size_t bytes) { check(cudaMalloc(&ptr_, std::max<size_t>(bytes, 16)), "cudaMalloc"); }

DeviceBytes::~DeviceBytes() {
  if (ptr_) cudaFree(ptr_);
}

double rms(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return v.empty() ? 0.0 : std::sqrt(s / v.size());
}

::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& ref, double rtol,
                                     const std::vector<double>* per_element_scale) {
  if (got.size() != ref.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != reference size " << ref.size();
  }
  const double scale = rms(ref);
  double worst = 0;
  size_t worst_i = 0, failures = 0, first = SIZE_MAX;
  for (size_t i = 0; i < got.size(); ++i) {
    const double s = per_element_scale ? std::max((*per_element_scale)[i], scale) : scale;
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double allowed = rtol * (std::fabs(ref[i]) + s);
    const double rel = err / (std::fabs(ref[i]) + s + 1e-300);
    if (!(err <= allowed)) {  // NaN fails
      ++failures;
      if (first == SIZE_MAX) first = i;
    }
    if (!(rel <= worst)) {
      worst = rel;
      worst_i = i;
    }
  }
  std::ostringstream msg;
  msg << "worst relative error " << worst << " at [" << worst_i << "] (got " << got[worst_i] << ", ref " << ref[worst_i]
      << "), rtol " << rtol;
  if (failures == 0) return ::testing::AssertionSuccess() << msg.str();
  return ::testing::AssertionFailure() << failures << " of " << got.size() << " elements out of tolerance; first ["
                                       << first << "] got " << got[first] << " ref " << ref[first] << "; " << msg.str();
}

}  // namespace dtrain::kernels::testing
