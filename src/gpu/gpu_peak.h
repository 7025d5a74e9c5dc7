// Peak dense tensor-core throughput of the GPUs dtrain knows, the
// denominator of model FLOPs utilisation (MFU, gpu/mfu.h). Torch-free.
//
// Figures are NVIDIA's datasheet numbers without sparsity, per GPU:
//   H100 SXM / H200 (SXM, NVL)   989.4 TFLOP/s bf16/fp16, 494.7 tf32
//   H100 PCIe                    756.0 bf16/fp16, 378.0 tf32
//   H100 NVL                     835.0 bf16/fp16, 417.5 tf32
//   A100 (SXM, PCIe)             312.0 bf16/fp16, 156.0 tf32
//   L40S                         362.05 bf16/fp16, 183.0 tf32
//   GH200 / GB200 use the H100 SXM / B200 rows; B200 2250 bf16, 1125 tf32.
// The name is matched as NVIDIA reports it (nvidia-smi, cudaDeviceProp.name),
// e.g. "NVIDIA H100 80GB HBM3" -> H100 SXM, "NVIDIA H200" -> H200.
#pragma once

#include <string>

namespace dtrain::gpu {

// FLOP/s of one GPU for `precision` ("bf16", "fp16", or "fp32" meaning TF32
// tensor cores), or 0 when the GPU is not in the table (MFU is then not
// reported). DTRAIN_PEAK_TFLOPS overrides the table (TFLOP/s, any GPU).
double peakDenseFlops(const std::string& gpu_name, const std::string& precision);

}  // namespace dtrain::gpu
