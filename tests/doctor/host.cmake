# The doctor runner and report, the host / RDMA / NCCL-environment / peer
# checks on fixture trees (fixture_tree.cc), host.numa against the fake NVML
# (tests/gpu/fake_nvml.cc), and `dtrain doctor` as a real process.
dtrain_add_test(doctor_host_test QUICK
  SOURCES fixture_tree.cc host_checks_test.cc host_runner_test.cc host_peer_test.cc
  LIBS dtrain_doctor dtrain_gpu
  NO_DTRAIN_BIN)
target_include_directories(doctor_host_test PRIVATE ${NLOHMANN_JSON_INCLUDE_DIR})
target_compile_definitions(doctor_host_test PRIVATE DTRAIN_FAKE_NVML="$<TARGET_FILE:dtrain_fake_nvml>")
add_dependencies(doctor_host_test dtrain_fake_nvml)

dtrain_add_test(doctor_cli_test QUICK
  SOURCES doctor_cli_test.cc fixture_tree.cc
  LIBS dtrain_doctor)
target_include_directories(doctor_cli_test PRIVATE ${NLOHMANN_JSON_INCLUDE_DIR})
