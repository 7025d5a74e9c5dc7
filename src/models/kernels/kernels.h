// The fused CUDA kernels of the models, torch-free: raw device
// pointers and a cudaStream_t (kernel_types.h states the conventions every
// kernel follows; README.md how the torch side calls each one).
#pragma once

#include "models/kernels/activation.h"
#include "models/kernels/batch_norm.h"
#include "models/kernels/cross_entropy.h"
#include "models/kernels/fp8_cast.h"
#include "models/kernels/kernel_types.h"
#include "models/kernels/max_pool.h"
#include "models/kernels/normalization.h"
#include "models/kernels/optimizer.h"
#include "models/kernels/rope.h"
