# `dtrain slurm conf|hostnames` against fixture trees, `slurmd -C`,
# `scontrol show hostnames` and the fake NVML; deploy/slurm/healthcheck.sh
# with a fake doctor and scontrol (slurm/fake_*.sh); and a real one-node
# Slurm on loopback (slurm/cluster_test.sh: munged, slurmctld, slurmd from
# Debian's packages, installed by scripts/setup.sh) running
# deploy/slurm/dtrain.sbatch.
dtrain_add_test(slurm_test QUICK
  SOURCES fixture_tree.cc slurm_conf_test.cc slurm_hostnames_test.cc slurm_healthcheck_test.cc
  LIBS dtrain_doctor)
target_compile_definitions(slurm_test PRIVATE DTRAIN_FAKE_NVML="$<TARGET_FILE:dtrain_fake_nvml>")
add_dependencies(slurm_test dtrain_fake_nvml)

# Starts and stops its own daemons on free ports; it holds both CPUs for
# its jobs (PROCESSORS 2 and the both_cpus lock of the other training runs)
# and starts among the first (COST: a clean clone has no timings), instead
# of running alone at the end. It stops itself after 420 s.
add_test(NAME slurm_cluster_test
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/cluster_test.sh $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR})
set_tests_properties(slurm_cluster_test PROPERTIES RESOURCE_LOCK both_cpus PROCESSORS 2 TIMEOUT 480 COST 250)
