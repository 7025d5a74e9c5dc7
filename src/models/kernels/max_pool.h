// 2-D max pooling over channels-last (NHWC) activations, forward and
// backward: ResNet's stem (kernel 3, stride 2, padding 1).
//
// x is [batch, height, width, channels] with channels contiguous (a
// channels-last NCHW tensor); y and argmax are [batch, out_h, out_w,
// channels], out = (in + 2 padding - kernel) / stride + 1 (floor, as torch
// without ceil_mode; max_pool2d_output_size). Square windows, no dilation.
// Activations (x, y, dy, dx) are fp32 or bf16 (act_dtype).
//
// Forward, per output element: the window's elements are scanned kh-major
// (kh, then kw) and an element replaces the maximum when `v > max ||
// isnan(v)` (torch's test): ties keep the first maximum, a NaN makes the
// output NaN (the last NaN of the window is the argmax). Padding is never
// chosen (it is not read); the maximum starts at -inf with the window's
// first in-bounds element as its index, so a window of -inf values points
// at that element. y is the chosen element's bits; argmax[...] = kh *
// kernel + kw, its index within the window (one byte: kernel <= 8).
//
// Backward is a gather: each thread owns input elements and sums, in fp32
// and in the order (oh, ow) ascending, the dy of the windows that contain
// the element and whose argmax is that element; dx is written everywhere
// (zero where no window chose the element), rounded once to act_dtype. No
// atomics: the same inputs give the same bits on every run. The sum has
// torch's order (its NHWC backward gathers the same way), so fp32 gradients
// equal libtorch's.
//
// How the torch side calls them: forward into fresh y and argmax (uint8)
// tensors; save argmax and the input's shape (not x); backward with dy
// made channels-last in act_dtype.
//
// Limits: kernel 1..8, stride >= 1, 0 <= padding <= kernel / 2 (torch's
// bound; every window then holds an input element), out_h, out_w >= 1;
// height * width * channels and out_h * out_w * channels below 2^31 (one
// image); batch 0 does nothing. 16-byte aligned x/y (dy/dx), argmax aligned
// to 8 (bf16) / 4 (fp32) bytes and channels divisible by 8 (bf16) / 4 (fp32)
// take the vector path. y must not overlap x; dx must not overlap dy or
// argmax.
#pragma once

#include "models/kernels/kernel_types.h"

namespace dtrain::kernels {

inline constexpr int kMaxPoolMaxKernel = 8;

// torch's output size without ceil_mode; 0 when the arguments are outside
// the limits above or the output would be empty.
inline constexpr int max_pool2d_output_size(int input, int kernel, int stride, int padding) {
  if (input < 1 || kernel < 1 || kernel > kMaxPoolMaxKernel || stride < 1 || padding < 0 || padding > kernel / 2) {
    return 0;
  }
  const int span = input + 2 * padding - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

// The forward's input shape (batch, height, width, channels) and window.
struct MaxPool2dShape {
  int64_t batch = 0;
  int height = 0;
  int width = 0;
  int channels = 0;
  int kernel = 3;
  int stride = 2;
  int padding = 1;
  DType act_dtype = DType::kBFloat16;
};

struct MaxPool2dForwardArgs : MaxPool2dShape {
  const void* x = nullptr;      // [batch, height, width, channels], act_dtype
  void* y = nullptr;            // [batch, out_h, out_w, channels], act_dtype
  uint8_t* argmax = nullptr;    // [batch, out_h, out_w, channels]: kh * kernel + kw
};

struct MaxPool2dBackwardArgs : MaxPool2dShape {
  const void* dy = nullptr;          // [batch, out_h, out_w, channels], act_dtype
  const uint8_t* argmax = nullptr;   // the forward's
  void* dx = nullptr;                // [batch, height, width, channels], act_dtype, every element written
};

cudaError_t max_pool2d_forward(const MaxPool2dForwardArgs& args, cudaStream_t stream);
cudaError_t max_pool2d_backward(const MaxPool2dBackwardArgs& args, cudaStream_t stream);

}  // namespace dtrain::kernels
