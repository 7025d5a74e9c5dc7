# Finds the optional and required dependencies once, and sets DTRAIN_HAVE_<X>.

# dtrain_resolve(<NAME> <option-value> <found>) -> DTRAIN_HAVE_<NAME>
function(dtrain_resolve name value found)
  if(value STREQUAL "OFF")
    set(DTRAIN_HAVE_${name} OFF PARENT_SCOPE)
  elseif(found)
    set(DTRAIN_HAVE_${name} ON PARENT_SCOPE)
  elseif(value STREQUAL "ON")
    message(FATAL_ERROR "DTRAIN_WITH_${name}=ON but ${name} was not found")
  else()
    set(DTRAIN_HAVE_${name} OFF PARENT_SCOPE)
  endif()
endfunction()

find_package(Threads REQUIRED)

# Header-only libraries: Debian's packages install them under /usr/include;
# a machine without them (the GPU machine) points DTRAIN_DEPS_PREFIX at an
# unpacked copy.
set(DTRAIN_DEPS_PREFIX "" CACHE PATH "Prefix holding unpacked header-only dependencies")
if(DTRAIN_DEPS_PREFIX)
  list(PREPEND CMAKE_PREFIX_PATH ${DTRAIN_DEPS_PREFIX}/usr ${DTRAIN_DEPS_PREFIX}/usr/share)
  include_directories(SYSTEM ${DTRAIN_DEPS_PREFIX}/usr/include)
endif()
find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
find_path(NLOHMANN_JSON_INCLUDE_DIR nlohmann/json.hpp REQUIRED)

# cpp-httplib, for `dtrain exporter`'s HTTP server. Debian builds it as a
# library (libcpp-httplib.so; its pkg-config Cflags carry the OpenSSL, zlib
# and brotli defines the header must be compiled with); upstream's single
# header, with the implementation inline, works as well. Without either,
# the exporter still builds, with --once and --list-metrics only.
set(_httplib_found FALSE)
if(NOT DTRAIN_WITH_HTTPLIB STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(CPP_HTTPLIB QUIET IMPORTED_TARGET cpp-httplib)
  endif()
  if(CPP_HTTPLIB_FOUND)
    add_library(dtrain_httplib INTERFACE)
    target_link_libraries(dtrain_httplib INTERFACE PkgConfig::CPP_HTTPLIB)
    set(_httplib_found TRUE)
  else()
    find_path(HTTPLIB_INCLUDE_DIR httplib.h)
    if(HTTPLIB_INCLUDE_DIR)
      file(STRINGS ${HTTPLIB_INCLUDE_DIR}/httplib.h _httplib_inline
           REGEX "^inline bool Server::listen_after_bind" LIMIT_COUNT 1)
      if(_httplib_inline)
        add_library(dtrain_httplib INTERFACE)
        target_include_directories(dtrain_httplib SYSTEM INTERFACE ${HTTPLIB_INCLUDE_DIR})
        target_link_libraries(dtrain_httplib INTERFACE Threads::Threads)
        set(_httplib_found TRUE)
      else()
        message(STATUS "dtrain: ${HTTPLIB_INCLUDE_DIR}/httplib.h needs its library (libcpp-httplib, not found by pkg-config)")
      endif()
    endif()
  endif()
endif()
dtrain_resolve(HTTPLIB "${DTRAIN_WITH_HTTPLIB}" "${_httplib_found}")

if(NOT DTRAIN_WITH_GLOO STREQUAL "OFF")
  find_package(Gloo QUIET)
endif()
dtrain_resolve(GLOO "${DTRAIN_WITH_GLOO}" "${Gloo_FOUND}")

set(DTRAIN_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit root (headers and libraries)")
if(NOT DTRAIN_WITH_NCCL STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${DTRAIN_CUDA_ROOT}/include $ENV{NCCL_HOME}/include)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${DTRAIN_CUDA_ROOT}/lib64 $ENV{NCCL_HOME}/lib)
endif()
if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(_nccl_found TRUE)
else()
  set(_nccl_found FALSE)
endif()
dtrain_resolve(NCCL "${DTRAIN_WITH_NCCL}" "${_nccl_found}")

# The fused CUDA kernels of models/kernels/ need a working CUDA compiler:
# nvcc under DTRAIN_CUDA_ROOT unless CMAKE_CUDA_COMPILER or $CUDACXX names
# another (check_language test-compiles it). CMAKE_CUDA_ARCHITECTURES
# defaults to 90 (H100/H200); override it, e.g. -DCMAKE_CUDA_ARCHITECTURES="80;90".
set(_cuda_kernels_found FALSE)
if(NOT DTRAIN_WITH_CUDA_KERNELS STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS ${DTRAIN_CUDA_ROOT}/bin/nvcc)
    set(ENV{CUDACXX} ${DTRAIN_CUDA_ROOT}/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures of the fused kernels")
    endif()
    enable_language(CUDA)
    set(_cuda_kernels_found TRUE)
  endif()
endif()
dtrain_resolve(CUDA_KERNELS "${DTRAIN_WITH_CUDA_KERNELS}" "${_cuda_kernels_found}")

if(NOT DTRAIN_WITH_TORCH STREQUAL "OFF")
  find_package(Torch QUIET)
endif()
dtrain_resolve(TORCH "${DTRAIN_WITH_TORCH}" "${Torch_FOUND}")

if(NOT DTRAIN_BUILD_TESTS STREQUAL "OFF")
  find_package(GTest QUIET)
endif()
dtrain_resolve(TESTS "${DTRAIN_BUILD_TESTS}" "${GTest_FOUND}")
