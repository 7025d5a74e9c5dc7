# `cpack -G DEB` in the build directory makes dtrain_<version>_<arch>.deb of
# what `cmake --install` installs (prefix /usr). dpkg-shlibdeps reads the
# installed ELF files and declares the Debian packages they need (libtorch,
# Gloo, NCCL where linked, ...); the packages dtrain runs but does not link
# are listed below. docs/packaging.md says how it is built and tested.
set(CPACK_PACKAGE_NAME dtrain)
set(CPACK_PACKAGE_VENDOR "dtrain")
set(DTRAIN_PACKAGE_MAINTAINER "dtrain maintainers <dtrain@localhost>" CACHE STRING
    "The Debian package's Maintainer, \"Name <address>\" (DEBFULLNAME and DEBEMAIL at cpack time win)")
set(CPACK_PACKAGE_CONTACT "${DTRAIN_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${DTRAIN_PACKAGE_MAINTAINER}")
set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_CURRENT_LIST_DIR}/DtrainPackageMaintainer.cmake)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed data-parallel training on GPU clusters (torchrun-compatible launcher, NCCL/Gloo collectives, libtorch runtime)")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_INSTALL_DIRECTORY dtrain)
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/dtrain/dtrain")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The dtrain libraries are found in the package itself.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ".${CPACK_PACKAGING_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}")
# Run, not linked: the text data of the main job; libtorch's headers and
# CMake files for find_package(dtrain).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "dataset-fashion-mnist, libtorch-dev, fortunes")
include(CPack)
