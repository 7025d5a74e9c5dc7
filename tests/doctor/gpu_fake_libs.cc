// Stand-ins for the CUDA runtime and NCCL that `dtrain doctor`'s gpu.cuda and
// gpu.nccl open with dlopen: built once per version (tests/doctor/gpu.cmake)
// with FAKE_CUDART_VERSION or FAKE_NCCL_VERSION defined.
extern "C" {

#ifdef FAKE_CUDART_VERSION
int cudaRuntimeGetVersion(int* version) {  // cudaError_t: 0 is cudaSuccess
  *version = FAKE_CUDART_VERSION;
  return 0;
}
#endif

#ifdef FAKE_NCCL_VERSION
int ncclGetVersion(int* version) {  // ncclResult_t: 0 is ncclSuccess
  *version = FAKE_NCCL_VERSION;
  return 0;
}
#endif

}  // extern "C"
