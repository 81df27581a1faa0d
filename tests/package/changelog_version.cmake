# The Debian package's version is the project's: debian/changelog's newest entry must carry the
# version of include/haltpoll/version.hpp (the upstream part, before any Debian revision).
# Usage: cmake -DCHANGELOG=<debian/changelog> -DVERSION=<x.y.z> -P changelog_version.cmake
file(STRINGS "${CHANGELOG}" _first LIMIT_COUNT 1)
if(NOT _first MATCHES "^haltpolld \\(([^)]+)\\) ")
  message(FATAL_ERROR "the first line of ${CHANGELOG} is not a haltpolld entry: '${_first}'")
endif()
set(_deb "${CMAKE_MATCH_1}")
string(REGEX REPLACE "^[0-9]+:" "" _upstream "${_deb}")     # epoch
string(REGEX REPLACE "-[^-]+$" "" _upstream "${_upstream}")  # Debian revision
if(NOT _upstream STREQUAL VERSION)
  message(FATAL_ERROR "debian/changelog says ${_deb} (upstream ${_upstream}), include/haltpoll/version.hpp says ${VERSION}: "
                      "add a changelog entry (dch -v ${VERSION}) or fix the header")
endif()
message(STATUS "debian/changelog ${_deb} matches version.hpp ${VERSION}")
