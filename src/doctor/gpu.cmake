# The GPU checks of `dtrain doctor` (gpu_checks.h: addGpuChecks).
target_sources(dtrain_doctor PRIVATE
  gpu_checks.cc
  gpu_expected.cc
  gpu_pci.cc
  gpu_versions.cc
  gpu_health.cc
  gpu_topology.cc
  gpu_allreduce.cc
)
