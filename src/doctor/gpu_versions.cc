#include "doctor/gpu_versions.h"

#include <dlfcn.h>

#include <vector>

#include "common/settings.h"
#include "gpu/nvml.h"

namespace dtrain::doctor {
namespace {

// A shared library opened for one call and closed again.
class OpenedLibrary {
 public:
  // Tries each name in turn; error() lists why each failed.
  explicit OpenedLibrary(const std::vector<std::string>& names) {
    for (const std::string& name : names) {
      handle_ = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle_ != nullptr) {
        name_ = name;
        return;
      }
      const char* why = ::dlerror();
      error_ += (error_.empty() ? "" : "; ") + (why != nullptr ? std::string(why) : name + ": cannot open");
    }
  }
  ~OpenedLibrary() {
    if (handle_ != nullptr) ::dlclose(handle_);
  }
  OpenedLibrary(const OpenedLibrary&) = delete;
  OpenedLibrary& operator=(const OpenedLibrary&) = delete;

  bool isOpen() const { return handle_ != nullptr; }
  const std::string& name() const { return name_; }
  const std::string& error() const { return error_; }
  void* symbol(const char* symbol) const { return ::dlsym(handle_, symbol); }

 private:
  void* handle_ = nullptr;
  std::string name_;
  std::string error_;
};

// Declared for `dtrain settings` and docs/settings.md; read through the
// check context's environment (tests give theirs).
DTRAIN_SETTING(std::string, kCudartLibrary, "cudart-library", "DTRAIN_CUDART_LIBRARY", "",
               "The CUDA runtime `dtrain doctor` asks for its version (gpu.cuda); empty: libcudart.so.13, "
               "libcudart.so.12, libcudart.so on the loader's path.");
DTRAIN_SETTING(std::string, kNcclLibrary, "nccl-library", "DTRAIN_NCCL_LIBRARY", "",
               "The NCCL library `dtrain doctor` asks for its version (gpu.nccl); empty: libnccl.so.2 on the "
               "loader's path.");

std::vector<std::string> candidates(const DoctorContext& ctx, const SettingBase& setting,
                                    std::vector<std::string> defaults) {
  auto chosen = ctx.envValue(setting.env());
  if (chosen && !chosen->empty()) return {*chosen};
  return defaults;
}

// CUDA encodes major * 1000 + minor * 10: 12080 is "12.8".
std::string cudaVersionText(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

bool anyGpu(const DoctorContext& ctx) { return ctx.nvml != nullptr && !ctx.nvml->gpus().empty(); }

}  // namespace

CheckResult checkCudaVersions(const DoctorContext& ctx) {
  const char* name = "gpu.cuda";
  if (ctx.nvml == nullptr) return skip(name, "NVML not available");
  auto driver = ctx.nvml->cudaDriverVersion();
  if (!driver) return skip(name, "the CUDA version of the driver is not readable (NVML: not supported)");
  const std::string driver_text = cudaVersionText(*driver);

  OpenedLibrary cudart(
      candidates(ctx, kCudartLibrary, {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}));
  if (!cudart.isOpen()) {
    return pass(name, "driver supports CUDA " + driver_text + "; no CUDA runtime found (libcudart)",
                "dlopen: " + cudart.error());
  }
  using RuntimeGetVersionFn = int (*)(int*);
  auto get_version = reinterpret_cast<RuntimeGetVersionFn>(cudart.symbol("cudaRuntimeGetVersion"));
  int runtime = 0;
  if (get_version == nullptr || get_version(&runtime) != 0) {
    return warn(name,
                "driver supports CUDA " + driver_text + "; " + cudart.name() +
                    (get_version == nullptr ? " has no cudaRuntimeGetVersion" : ": cudaRuntimeGetVersion failed"),
                "point DTRAIN_CUDART_LIBRARY at the libcudart.so the training uses");
  }
  const std::string runtime_text = cudaVersionText(runtime);
  const std::string found =
      "driver supports CUDA " + driver_text + ", runtime CUDA " + runtime_text + " (" + cudart.name() + ")";
  if (runtime / 1000 > *driver / 1000) {
    return fail(name, found + ": the runtime's major version is newer than the driver's",
                "install a driver that supports CUDA " + runtime_text +
                    " (or the cuda-compat forward-compatibility package on data-center GPUs), or use a CUDA " +
                    std::to_string(*driver / 1000) + ".x build");
  }
  if (runtime > *driver) {
    return warn(name, found + ": runs through minor-version compatibility",
                "features that need a newer driver (JIT of newer PTX, some new APIs) fail; install a driver that "
                "supports CUDA " + runtime_text);
  }
  return pass(name, found);
}

CheckResult checkNcclVersion(const DoctorContext& ctx) {
  const char* name = "gpu.nccl";
  OpenedLibrary nccl(candidates(ctx, kNcclLibrary, {"libnccl.so.2"}));
  if (!nccl.isOpen()) {
    if (!anyGpu(ctx)) return skip(name, "no GPUs; NCCL not found either", "dlopen: " + nccl.error());
    return warn(name, "libnccl.so.2 not found: the NCCL backend cannot run",
                "install NCCL (the libnccl2 package, or pip's nvidia-nccl-cu* and its lib directory on "
                "LD_LIBRARY_PATH), or point DTRAIN_NCCL_LIBRARY at libnccl.so.2",
                "dlopen: " + nccl.error());
  }
  using GetVersionFn = int (*)(int*);
  auto get_version = reinterpret_cast<GetVersionFn>(nccl.symbol("ncclGetVersion"));
  int code = 0;
  if (get_version == nullptr || get_version(&code) != 0) {
    return warn(name,
                nccl.name() + (get_version == nullptr ? " has no ncclGetVersion" : ": ncclGetVersion failed") +
                    ": not a usable NCCL",
                "install NCCL 2 (libnccl2) or point DTRAIN_NCCL_LIBRARY at libnccl.so.2");
  }
  // NCCL_VERSION_CODE: X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before.
  int major = code >= 10000 ? code / 10000 : code / 1000;
  int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
  int patch = code % 100;
  return pass(name,
              "NCCL " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch) + " (" +
                  nccl.name() + ")");
}

}  // namespace dtrain::doctor
