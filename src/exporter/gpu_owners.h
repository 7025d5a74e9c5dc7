// Which job owns a GPU: the GPU's compute processes (NVML) mapped to the
// Slurm job or the Kubernetes pod their cgroup names (/proc/<pid>/cgroup,
// read through a SystemRoot). The exporter adds them as labels to the GPU's
// series, as dcgm-exporter does with its HPC job mapping (`hpc_job`) and its
// kubelet pod mapping (`pod`, `namespace`, `container`). Without the
// kubelet's pod-resources socket only the pod's UID is known, so it is the
// `pod_uid` label; the pod's name and namespace are not guessed.
//
// NVML gives pids of the host's PID namespace: an exporter in a container
// needs the host's /proc (hostPID) to see them; a pid it cannot read is
// skipped.
#pragma once

#include <compare>
#include <optional>
#include <string>
#include <vector>

#include "common/system_root.h"
#include "gpu/nvml.h"

namespace dtrain::exporter {

struct GpuOwner {
  std::string hpc_job;  // the Slurm job id ("123"), empty when not a Slurm job
  std::string pod_uid;  // the Kubernetes pod UID, empty when not in a pod

  auto operator<=>(const GpuOwner&) const = default;
};

// The owner the text of a /proc/<pid>/cgroup file names: a Slurm job
// (cgroup v1 "/slurm/uid_0/job_123/step_0", v2
// "/system.slice/slurmstepd.scope/job_123/step_0/...") or a Kubernetes pod
// (".../kubepods/burstable/pod<uid>/<container>" with the cgroupfs driver,
// ".../kubepods-burstable-pod<uid with _>.slice/..." with systemd's);
// nullopt when it names neither.
std::optional<GpuOwner> ownerFromCgroup(const std::string& cgroup_text);

// The distinct owners of the processes, sorted. A process whose cgroup names
// no owner, or whose /proc entry is gone or hidden, adds none.
std::vector<GpuOwner> ownersOf(const SystemRoot& root, const std::vector<gpu::NvmlProcess>& processes);

}  // namespace dtrain::exporter
