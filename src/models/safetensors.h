// Named tensors in the safetensors format (Hugging Face's), the weights
// exchange that PyTorch, JAX and the reference in bench/peers/ all read:
//
//   8 bytes   little-endian uint64 N, the header's length
//   N bytes   JSON: {"<name>": {"dtype": "F32", "shape": [2, 3],
//                               "data_offsets": [begin, end]}, ...,
//                    "__metadata__": {"<key>": "<string>", ...}}  (optional)
//   the rest  the tensors' bytes, row-major, little-endian; offsets are
//             relative to the end of the header and tile it without holes
//
// dtypes: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL.
//
// A file that breaks these rules is a ConfigError naming the file and the
// rule (header longer than the file, offsets out of range or overlapping,
// a size that disagrees with dtype x shape, an unknown dtype); an OS
// failure is an IoError naming the file.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::models {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct SafetensorsContents {
  NamedTensors tensors;                          // in the order of their data
  std::map<std::string, std::string> metadata;   // __metadata__, if any
};

// Writes the tensors (any device, any strides; copied to contiguous CPU
// memory one at a time) in the order given. Names must be unique and not
// "__metadata__".
void writeSafetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor onto the CPU.
SafetensorsContents readSafetensors(const std::string& path);

// The file memory-mapped (read-only): every tensor a CPU view of the
// mapping, which lives while any of them does; only the pages of what is
// read from them are read from the file. Checked as readSafetensors.
SafetensorsContents mapSafetensors(const std::string& path);

// A module's parameters and buffers under their state-dict names.
void saveModuleSafetensors(const torch::nn::Module& module, const std::string& path,
                           const std::map<std::string, std::string>& metadata = {});

// Copies a file's tensors into the module's parameters and buffers of the
// same names (converting dtype, onto the module's device). Strict: a name
// missing on either side or a shape that differs is a ConfigError naming
// the file and the tensor. Returns the file's metadata.
std::map<std::string, std::string> loadModuleSafetensors(torch::nn::Module& module, const std::string& path);

}  // namespace dtrain::models
