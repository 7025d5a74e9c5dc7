// The error file a worker writes before it dies (launch/): torchrun's
// TORCHELASTIC_ERROR_FILE, as written by torch.distributed.elastic's
// @record: {"message": {"message": "...", "extraInfo": {"py_callstack": ...,
// "timestamp": "..."}}}. No torch, no CUDA.
#pragma once

#include <optional>
#include <string>

namespace dtrain {

struct ErrorFileReport {
  std::string contents;  // the raw text (at most kMaxErrorFileBytes of it)
  std::string message;   // message.message (or a plain string message); "" when absent
};

inline constexpr size_t kMaxErrorFileBytes = 256 * 1024;

// nullopt when `path` is empty or the worker wrote no file there. A file
// that is not JSON (or not torchrun's shape) keeps its raw text with an
// empty message; it never throws.
std::optional<ErrorFileReport> readErrorFile(const std::string& path);

}  // namespace dtrain
