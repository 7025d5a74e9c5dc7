// The GPUs `dtrain plan` sizes runs for: memory, dense peaks, memory
// bandwidth and the all-reduce bus bandwidth inside a node (torch-free).
//
// Peaks are NVIDIA's dense (no sparsity) figures, as gpu/gpu_peak.cc's MFU
// table; memory is what nvidia-smi reports (the H200's 143771 MiB measured
// on the GPU machine). intra_node_busbw is nccl-tests' all-reduce bus
// bandwidth at 1 GiB inside one node: 353 GB/s measured on 4x H200
// (docs/benchmarks.md) for the NVLink-4 parts; the others from their
// links' rate at the same efficiency. `dtrain plan --intra-node-gbs`
// overrides it.
#pragma once

#include <string>
#include <vector>

namespace dtrain::plan {

struct GpuSpec {
  std::string name;          // as --gpu spells it
  std::string description;
  double memory_gib = 0;
  double bf16_tflops = 0;    // dense
  double fp8_tflops = 0;     // dense; 0: no FP8 tensor cores
  double hbm_tbs = 0;        // memory bandwidth, TB/s
  double intra_node_busbw = 0;  // GB/s, all-reduce inside a node
  int max_gpus_per_node = 8;
  int compute_capability = 0;  // major x 10 + minor
};

const std::vector<GpuSpec>& gpuCatalog();

// The entry for --gpu NAME (case-insensitive, "h100-sxm" and "h100" alike);
// ConfigError listing the names otherwise.
const GpuSpec& gpuByName(const std::string& name);

}  // namespace dtrain::plan
