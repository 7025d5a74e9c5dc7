# Read by cpack when it runs (CPACK_PROJECT_CONFIG_FILE), not when CMake
# configures: the package's Maintainer is whoever builds it, named as
# Debian's tools take it (dch, dh_make): DEBFULLNAME and DEBEMAIL in the
# environment, or -DDTRAIN_PACKAGE_MAINTAINER="Name <address>" at configure
# time. Without either, the placeholder stays and cpack says so.
if(NOT "$ENV{DEBEMAIL}" STREQUAL "")
  if(NOT "$ENV{DEBFULLNAME}" STREQUAL "")
    set(CPACK_DEBIAN_PACKAGE_MAINTAINER "$ENV{DEBFULLNAME} <$ENV{DEBEMAIL}>")
  else()
    set(CPACK_DEBIAN_PACKAGE_MAINTAINER "$ENV{DEBEMAIL}")
  endif()
elseif(CPACK_DEBIAN_PACKAGE_MAINTAINER STREQUAL "dtrain maintainers <dtrain@localhost>")
  message(WARNING "dtrain's package: no maintainer given, so its Maintainer field is the placeholder "
                  "'${CPACK_DEBIAN_PACKAGE_MAINTAINER}'; set DEBFULLNAME and DEBEMAIL (or configure with "
                  "-DDTRAIN_PACKAGE_MAINTAINER=\"Name <address>\") to name whoever builds and supports it")
endif()
