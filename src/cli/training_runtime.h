// The training runtime (libdtrain_train, and with it libtorch) is loaded
// with dlopen only by the commands that need it (`train`, `bench train`), so
// that launch, bench and the other tools start in milliseconds.
// Loading it also keeps the heap that libtorch frees (common/heap.h).
#pragma once

#include <string>

namespace dtrain::cli {

// The address of the runtime's extern "C" function `name`. The library is
// looked for where the build put it, next to this binary, in ../lib, then
// wherever the dynamic loader finds it. IoError listing what was tried.
void* trainingRuntimeSymbol(const std::string& name);

template <typename Fn>
Fn trainingRuntime(const std::string& name) {
  return reinterpret_cast<Fn>(trainingRuntimeSymbol(name));
}

}  // namespace dtrain::cli
