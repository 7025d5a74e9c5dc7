// The seam through which dtrain reads the machine (common/): every /proc,
// /sys and /etc read of `dtrain doctor` and `dtrain slurm conf` goes through a
// SystemRoot, so tests point it at a fixture tree (`--root DIR`) holding
// proc/..., sys/..., etc/... files instead of the live system.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dtrain {

class SystemRoot {
 public:
  // "/" (the live system) or a directory standing in for it. Throws
  // ConfigError naming the directory when it does not exist.
  explicit SystemRoot(std::string root = "/");

  const std::string& root() const { return root_; }
  bool isLive() const { return root_ == "/"; }

  // The host path of an absolute system path: path("/proc/meminfo") is
  // "<root>/proc/meminfo".
  std::string path(const std::string& system_path) const;

  // The whole file, or nullopt when it does not exist or cannot be read.
  std::optional<std::string> read(const std::string& system_path) const;
  // The first line without its newline and surrounding whitespace.
  std::optional<std::string> readLine(const std::string& system_path) const;
  std::optional<long long> readInt(const std::string& system_path) const;
  bool exists(const std::string& system_path) const;
  // The entry names of a directory, sorted, without "." and ".."; empty when
  // it does not exist. Symbolic links are listed as entries.
  std::vector<std::string> list(const std::string& system_path) const;
  // The target of a symbolic link, or nullopt.
  std::optional<std::string> readLink(const std::string& system_path) const;

 private:
  std::string root_;
};

}  // namespace dtrain
