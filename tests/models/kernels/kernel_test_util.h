// Helpers of the fused-kernel tests: GPU detection (tests skip without
// one), bf16 on the host, device buffers, random data and tolerance checks.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/kernels/kernel_types.h"

namespace dtrain::kernels::testing {

// Empty when a CUDA device is usable, else why not.
std::string gpu_unavailable_reason();

#define DTRAIN_SKIP_WITHOUT_GPU()                                                   \
  do {                                                                              \
    const std::string dtrain_no_gpu_ = gpu_unavailable_reason();                    \
    if (!dtrain_no_gpu_.empty()) GTEST_SKIP() << "no CUDA GPU: " << dtrain_no_gpu_; \
  } while (0)

#define DTRAIN_CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

uint16_t float_to_bf16(float v);  // round to nearest even
float bf16_to_float(uint16_t v);
// v rounded to what `t` can hold.
float round_to(DType t, float v);

// Values already representable in the dtype, so host references see exactly
// what the GPU reads.
std::vector<float> random_values(size_t n, uint32_t seed, DType t, float scale = 1.f, float offset = 0.f);

// A device allocation holding a tensor of `dtype` (plus `pad_bytes` of
// slack, to test unaligned views at data() + k).
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(size_t count, DType dtype, size_t pad_bytes = 0);
  DeviceTensor(const std::vector<float>& values, DType dtype, size_t pad_bytes = 0);
  ~DeviceTensor();
  DeviceTensor(DeviceTensor&& o) noexcept;
  DeviceTensor& operator=(DeviceTensor&& o) noexcept;
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  void* data() const { return ptr_; }
  float* f32() const { return static_cast<float*>(ptr_); }
  size_t count() const { return count_; }
  DType dtype() const { return dtype_; }
  void upload(const std::vector<float>& values, size_t offset_elems = 0);
  std::vector<float> download(size_t offset_elems = 0, size_t count = SIZE_MAX) const;
  std::vector<uint8_t> bytes() const;  // the whole allocation, for bitwise comparisons
  void fill_nan();                     // poison: every element not written shows up

 private:
  void* ptr_ = nullptr;
  size_t count_ = 0;
  size_t alloc_bytes_ = 0;
  DType dtype_ = DType::kFloat32;
};

class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes);
  ~DeviceBytes();
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void* data() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

// A kernel's amax_bits slot: one device uint32, zeroed on construction
// (the caller's part of the contract), read back with bits().
class DeviceAmax {
 public:
  DeviceAmax();
  ~DeviceAmax();
  DeviceAmax(const DeviceAmax&) = delete;
  DeviceAmax& operator=(const DeviceAmax&) = delete;
  uint32_t* data() const { return ptr_; }
  uint32_t bits() const;

 private:
  uint32_t* ptr_ = nullptr;
};

// What an amax slot should hold for these stored values: the largest bit
// pattern of |v| (non-negative floats order as their bits, a NaN above
// infinity).
uint32_t amax_bits_of(const std::vector<float>& values);

// gtest assertion: a slot's bits are amax_bits_of's (any NaN for a NaN).
::testing::AssertionResult same_amax(uint32_t got, uint32_t want);

// Tolerances (relative): fp32 outputs 1e-5, bf16 outputs 1e-2 (bf16 keeps 8
// bits of mantissa: rounding alone is 2^-9). An element passes when
//   |got - ref| <= rtol * (|ref| + scale)
// where scale is the reference's RMS (so values near zero are judged
// against the tensor's magnitude), or the larger of that and a given
// per-element scale (for sums: the sum of |terms|, the scale of their
// rounding).
inline constexpr float kRtolF32 = 1e-5f;
inline constexpr float kRtolBF16 = 1e-2f;
inline float rtol_for(DType t) { return t == DType::kFloat32 ? kRtolF32 : kRtolBF16; }

double rms(const std::vector<double>& v);

// gtest assertion: every element within tolerance, NaN never passes; names
// the first failing element and the worst relative error.
::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& ref, double rtol,
                                     const std::vector<double>* per_element_scale = nullptr);

}  // namespace dtrain::kernels::testing
