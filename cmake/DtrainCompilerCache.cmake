# ccache, when installed, in front of the C, C++ and CUDA compilers: a second
# build of the same sources (another clone, a CI run after a session's) takes
# its objects from the cache instead of compiling libtorch's headers again.
# The cache lives outside the build tree (ccache's own default, ~/.cache/ccache,
# or $CCACHE_DIR), so a fresh clone reuses it. DTRAIN_CCACHE=OFF turns it off;
# a CMAKE_<LANG>_COMPILER_LAUNCHER given by the user wins.
set(DTRAIN_CCACHE AUTO CACHE STRING "Compile through ccache when found: AUTO|ON|OFF")
if(NOT DTRAIN_CCACHE STREQUAL "OFF")
  find_program(DTRAIN_CCACHE_PROGRAM ccache)
  if(NOT DTRAIN_CCACHE_PROGRAM AND DTRAIN_CCACHE STREQUAL "ON")
    message(FATAL_ERROR "DTRAIN_CCACHE=ON but ccache was not found")
  endif()
endif()
if(DTRAIN_CCACHE_PROGRAM AND NOT DTRAIN_CCACHE STREQUAL "OFF")
  # Precompiled headers are cached only with these sloppinesses (ccache's
  # manual, "Precompiled headers"); CMake's PCH consumers name the header with
  # -include, which needs -fpch-preprocess for GCC.
  # CCACHE_BASEDIR makes the paths inside the source tree relative, so a
  # clone in another folder (CI's) hits the objects of this one.
  set(_launcher ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" CCACHE_NOHASHDIR=1
      ${DTRAIN_CCACHE_PROGRAM})
  foreach(lang C CXX CUDA)
    if(NOT CMAKE_${lang}_COMPILER_LAUNCHER)
      set(CMAKE_${lang}_COMPILER_LAUNCHER ${_launcher})
    endif()
  endforeach()
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fpch-preprocess>)
  endif()
  message(STATUS "dtrain: compiling through ${DTRAIN_CCACHE_PROGRAM}")
endif()
