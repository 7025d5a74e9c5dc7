# `cmake --install`: the binary, the libraries, the public headers and a CMake
# package, so that an application outside this tree does
#
#   find_package(dtrain REQUIRED)            # finds Torch too
#   target_link_libraries(app PRIVATE dtrain::train)
#
# and `cpack -G DEB` the Debian package of the same tree (docs/packaging.md).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DTRAIN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dtrain)

# Installed programs find the libraries next to them; libtorch outside the
# loader's default paths (a pip wheel) stays reachable through its link path.
file(RELATIVE_PATH _dtrain_bin_to_lib ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}
     ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR})

# The library targets: every dtrain_* library built here.
set(_dtrain_libraries)
foreach(name bench checkpoint checkpoint_format checkpoint_options comm common data doctor exporter generate_options gpu
             kernels launch live_page metrics model_catalog models nccl optim parallel parallel_core plan rendezvous
             sentencepiece store text tools train train_options)
  if(TARGET dtrain_${name})
    get_target_property(_type dtrain_${name} TYPE)
    if(_type MATCHES "^(SHARED_LIBRARY|MODULE_LIBRARY|STATIC_LIBRARY)$")
      list(APPEND _dtrain_libraries dtrain_${name})
    endif()
  endif()
endforeach()
foreach(target IN LISTS _dtrain_libraries)
  # Versioned SONAMEs (libdtrain_comm.so.0.2): before 1.0 every minor
  # version may change the ABI.
  get_target_property(_type ${target} TYPE)
  if(_type STREQUAL "SHARED_LIBRARY")
    set_target_properties(${target} PROPERTIES VERSION ${PROJECT_VERSION}
                                               SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  endif()
  # The CUDA kernels' library links only the CUDA runtime (its link path);
  # nvcc's link leaves no room in its RUNPATH to add $ORIGIN.
  if(NOT target STREQUAL "dtrain_kernels")
    set_property(TARGET ${target} PROPERTY INSTALL_RPATH "$ORIGIN")
  endif()
  set_property(TARGET ${target} PROPERTY INSTALL_RPATH_USE_LINK_PATH TRUE)
endforeach()
set_property(TARGET dtrain PROPERTY INSTALL_RPATH "$ORIGIN/${_dtrain_bin_to_lib}")
set_property(TARGET dtrain PROPERTY INSTALL_RPATH_USE_LINK_PATH TRUE)

# The exported set: dtrain_train and the dtrain libraries in its link
# interface. Their include directories in this tree (src/ is private) become
# build-only; the installed ones are the public headers alone.
set(_dtrain_export)
set(_dtrain_pending)
if(TARGET dtrain_train)
  set(_dtrain_pending dtrain_train)
endif()
while(_dtrain_pending)
  list(POP_FRONT _dtrain_pending target)
  if(target IN_LIST _dtrain_export)
    continue()
  endif()
  list(APPEND _dtrain_export ${target})
  # Private links too: CMake names a shared library's private static and
  # interface dependencies in its export.
  get_target_property(_links ${target} INTERFACE_LINK_LIBRARIES)
  get_target_property(_private ${target} LINK_LIBRARIES)
  if(_private)
    list(APPEND _links ${_private})
  endif()
  if(_links)
    foreach(link IN LISTS _links)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" link "${link}")
      if(link MATCHES "^dtrain_" AND TARGET ${link})
        list(APPEND _dtrain_pending ${link})
      endif()
    endforeach()
  endif()
endwhile()

function(dtrain_build_only_includes target property)
  get_target_property(_dirs ${target} ${property})
  if(NOT _dirs)
    return()
  endif()
  set(_public FALSE)
  set(_result)
  foreach(dir IN LISTS _dirs)
    if(dir STREQUAL "${PROJECT_SOURCE_DIR}/include")
      set(_public TRUE)
    endif()
    if(dir MATCHES "^\\$<")
      list(APPEND _result "${dir}")
    else()
      list(APPEND _result "$<BUILD_INTERFACE:${dir}>")
    endif()
  endforeach()
  if(_public)
    list(APPEND _result "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
  endif()
  set_property(TARGET ${target} PROPERTY ${property} "${_result}")
endfunction()

foreach(target IN LISTS _dtrain_export)
  dtrain_build_only_includes(${target} INTERFACE_INCLUDE_DIRECTORIES)
  dtrain_build_only_includes(${target} INTERFACE_SYSTEM_INCLUDE_DIRECTORIES)
  # dtrain::train, dtrain::comm, ... for the application's CMakeLists.
  string(REGEX REPLACE "^dtrain_" "" _short ${target})
  set_property(TARGET ${target} PROPERTY EXPORT_NAME ${_short})
  if(NOT TARGET dtrain::${_short})
    add_library(dtrain::${_short} ALIAS ${target})
  endif()
endforeach()

list(REMOVE_ITEM _dtrain_libraries ${_dtrain_export})
if(_dtrain_export)
  install(TARGETS ${_dtrain_export} EXPORT dtrainTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT dtrainTargets NAMESPACE dtrain:: DESTINATION ${DTRAIN_CMAKE_DIR})
endif()
if(_dtrain_libraries)
  install(TARGETS ${_dtrain_libraries}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(TARGETS dtrain RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/dtrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")

# The exported libraries link the CUDA runtime only when libtorch is a
# CUDA build (the NCCL backend, libdtrain_nccl.so, is loaded at run time
# and exported by nothing): a consumer without CUDA configures and builds.
set(DTRAIN_EXPORT_NEEDS_CUDA OFF)
if(TARGET c10_cuda)
  set(DTRAIN_EXPORT_NEEDS_CUDA ON)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dtrainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dtrainConfig.cmake INSTALL_DESTINATION ${DTRAIN_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dtrainConfig.cmake ${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake
        DESTINATION ${DTRAIN_CMAKE_DIR})

# What an operator needs beside the binary: the deploy/ files, the examples
# and the documents.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/ DESTINATION ${CMAKE_INSTALL_DATADIR}/dtrain/deploy
        USE_SOURCE_PERMISSIONS)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/dtrain/examples)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/CHANGELOG.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
