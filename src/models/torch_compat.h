// The one place where libtorch version differences live (models/ compiles
// against Debian's libtorch 1.13 and the 2.x shipped with PyTorch).
//
// The model zoo uses only the torch::nn C++ API that is identical across
// 1.13 and 2.x, so nothing needs adapting yet. A future difference goes here
// as a macro or inline shim guarded by DTRAIN_TORCH_AT_LEAST, never as an
// #if in a model file.
#pragma once

#include <torch/version.h>

#define DTRAIN_TORCH_AT_LEAST(major, minor)                   \
  (TORCH_VERSION_MAJOR > (major) ||                           \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

static_assert(DTRAIN_TORCH_AT_LEAST(1, 13),
              "dtrain models/ needs libtorch 1.13 or newer");
