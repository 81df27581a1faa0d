# The tuning layer decides; it does no I/O of its own and knows nothing of Asio. Boost sits on the
# system include path, so no target can forbid it: this script fails when a file under
# src/daemon/tuning includes a header that would let it open files, sockets or event loops.
#   cmake -DDIR=<src/daemon/tuning> -P lint_includes.cmake
set(_forbidden
  "boost/" "asio" "fstream" "filesystem" "cstdio" "stdio.h" "fcntl.h" "unistd.h" "sys/stat.h"
  "sys/socket.h" "sys/types.h" "dirent.h" "sysfs/file_io.hpp"
  # JSON belongs to the control edge: the tuning layer hands over structs (controller_status.hpp).
  "nlohmann/")
file(GLOB _files "${DIR}/*.hpp" "${DIR}/*.cpp")
if(NOT _files)
  message(FATAL_ERROR "no sources under ${DIR}")
endif()
set(_bad "")
foreach(_f IN LISTS _files)
  file(STRINGS "${_f}" _includes REGEX "^[ \t]*#[ \t]*include")
  foreach(_line IN LISTS _includes)
    foreach(_h IN LISTS _forbidden)
      string(FIND "${_line}" "${_h}" _pos)
      if(NOT _pos EQUAL -1)
        list(APPEND _bad "${_f}: ${_line}")
      endif()
    endforeach()
  endforeach()
endforeach()
if(_bad)
  list(JOIN _bad "\n  " _msg)
  message(FATAL_ERROR "the tuning layer must not include I/O or Asio headers:\n  ${_msg}")
endif()
list(LENGTH _files _n)
message(STATUS "tuning lint: ${_n} files clean")
