# The GPU checks (src/doctor/gpu_*.cc) as functions, against the fake NVML
# (tests/gpu/fake_nvml.cc, its scenarios through FAKE_NVML_SCENARIO),
# fake CUDA runtimes and a fake NCCL (gpu_fake_libs.cc), fixture roots and
# scripts standing in for `dtrain launch`.
set(doctor_gpu_fake_libs
  "dtrain_fake_cudart_12_8\;FAKE_CUDART_VERSION=12080"
  "dtrain_fake_cudart_13_1\;FAKE_CUDART_VERSION=13010"
  "dtrain_fake_cudart_14_0\;FAKE_CUDART_VERSION=14000"
  "dtrain_fake_nccl\;FAKE_NCCL_VERSION=22809"
)
dtrain_add_test(doctor_gpu_checks_test QUICK SOURCES gpu_checks_test.cc LIBS dtrain_doctor dtrain_gpu NO_DTRAIN_BIN)
target_include_directories(doctor_gpu_checks_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/gpu)
target_compile_definitions(doctor_gpu_checks_test PRIVATE DTRAIN_FAKE_NVML="$<TARGET_FILE:dtrain_fake_nvml>")
add_dependencies(doctor_gpu_checks_test dtrain_fake_nvml)
foreach(entry ${doctor_gpu_fake_libs})
  list(GET entry 0 lib)
  list(GET entry 1 definition)
  add_library(${lib} SHARED gpu_fake_libs.cc)
  target_compile_definitions(${lib} PRIVATE ${definition})
  string(TOUPPER ${lib} macro)
  target_compile_definitions(doctor_gpu_checks_test PRIVATE ${macro}="$<TARGET_FILE:${lib}>")
  add_dependencies(doctor_gpu_checks_test ${lib})
endforeach()
