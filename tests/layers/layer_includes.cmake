# The layers of the tree and what each may include, checked on every #include under include/ and
# src/. The layers and their allowed dependencies are read from the table of docs/hacking.md
# ("## Layers"), so the documentation and the check cannot drift apart:
#   | layer | targets | files | may include |
# `files` are paths under the root (a folder ends with "/"; the most specific entry claims a
# file), `may include` a comma-separated list of layers ("—": none). A layer always sees itself.
# The script fails when a file
#   - includes a header of a layer its row does not list (a layer above it, or beside it),
#   - includes a quoted header that resolves to no file (the check would not see its layer),
#   - belongs to no layer (a new folder must be placed in the table first),
# and, for the layers that decide or carry values (signals, tuning), when a file includes a system
# header that would let it open files, sockets or event loops, or JSON (Boost sits on the system
# include path, so no target can forbid it).
#   cmake -DROOT=<source tree> [-DDOC=<hacking.md>] -P layer_includes.cmake
cmake_minimum_required(VERSION 3.25)
if(NOT ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<source tree> [-DDOC=<hacking.md>] -P layer_includes.cmake")
endif()
if(NOT DOC)
  set(DOC "${ROOT}/docs/hacking.md")
endif()

set(_no_io
  "boost/" "asio" "fstream" "filesystem" "cstdio" "stdio.h" "fcntl.h" "unistd.h" "sys/stat.h"
  "sys/socket.h" "sys/types.h" "dirent.h"
  # JSON belongs to the control edge: these layers hand over structs (tuning/controller_status.hpp).
  "nlohmann/")
set(_no_io_layers signals tuning)
# Quoted includes resolve against the including file's folder, then these roots (the targets'
# include directories).
set(_roots "src/daemon" "src" "src/bpf" "include")

include(${CMAKE_CURRENT_LIST_DIR}/layer_table.cmake)

# The layer of a path relative to ROOT ("" when none): the longest matching entry.
function(layer_of rel out)
  set(_best "")
  set(_best_len -1)
  foreach(_e IN LISTS _paths)
    string(REGEX MATCH "^([^=]*)=(.*)$" _m "${_e}")
    set(_p "${CMAKE_MATCH_1}")
    set(_l "${CMAKE_MATCH_2}")
    string(LENGTH "${_p}" _len)
    if(_p MATCHES "/$")
      string(FIND "${rel}" "${_p}" _pos)
    elseif(rel STREQUAL _p)
      set(_pos 0)
    else()
      set(_pos -1)
    endif()
    if(_pos EQUAL 0 AND _len GREATER _best_len)
      set(_best "${_l}")
      set(_best_len ${_len})
    endif()
  endforeach()
  set(${out} "${_best}" PARENT_SCOPE)
endfunction()

# --- the files -------------------------------------------------------------------------------
file(GLOB_RECURSE _files RELATIVE "${ROOT}"
  "${ROOT}/include/*.hpp" "${ROOT}/include/*.h"
  "${ROOT}/src/*.hpp" "${ROOT}/src/*.h" "${ROOT}/src/*.cpp" "${ROOT}/src/*.c")
if(NOT _files)
  message(FATAL_ERROR "no sources under ${ROOT}/src")
endif()
set(_bad "")
set(_edges "")
foreach(_f IN LISTS _files)
  layer_of("${_f}" _layer)
  if(NOT _layer)
    list(APPEND _bad "${_f}: in no layer of the table in ${DOC}")
    continue()
  endif()
  get_filename_component(_dir "${_f}" DIRECTORY)
  file(STRINGS "${ROOT}/${_f}" _includes ENCODING UTF-8 REGEX "^[ \t]*#[ \t]*include")
  foreach(_line IN LISTS _includes)
    if(_line MATCHES "#[ \t]*include[ \t]*\"([^\"]+)\"")
      set(_h "${CMAKE_MATCH_1}")
      set(_target "")
      foreach(_r IN ITEMS "${_dir}" ${_roots})
        if(EXISTS "${ROOT}/${_r}/${_h}")
          file(RELATIVE_PATH _target "${ROOT}" "${ROOT}/${_r}/${_h}")
          break()
        endif()
      endforeach()
      if(NOT _target)
        if(_h MATCHES "\\.skel\\.h$")  # generated at build time (src/bpf/CMakeLists.txt)
          continue()
        endif()
        list(APPEND _bad "${_f}: ${_line}: resolves to no file under ${_roots}")
        continue()
      endif()
    elseif(_line MATCHES "#[ \t]*include[ \t]*<([^>]+)>")
      set(_h "${CMAKE_MATCH_1}")
      if(_layer IN_LIST _no_io_layers)
        foreach(_x IN LISTS _no_io)
          string(FIND "${_h}" "${_x}" _pos)
          if(NOT _pos EQUAL -1)
            list(APPEND _bad "${_f}: ${_line}: the ${_layer} layer does no I/O of its own (no files, sockets, event loops or JSON)")
          endif()
        endforeach()
      endif()
      if(NOT EXISTS "${ROOT}/include/${_h}")
        continue()  # a system or third-party header
      endif()
      set(_target "include/${_h}")
    else()
      continue()
    endif()
    layer_of("${_target}" _to)
    if(NOT _to)
      list(APPEND _bad "${_f}: ${_line}: ${_target} is in no layer")
    elseif(NOT _to IN_LIST _allowed_${_layer})
      list(APPEND _bad "${_f}: ${_line}: the ${_layer} layer may not include the ${_to} layer")
    elseif(NOT _to STREQUAL _layer)
      list(APPEND _edges "${_layer} -> ${_to}")
    endif()
  endforeach()
endforeach()
if(_bad)
  list(JOIN _bad "\n  " _msg)
  message(FATAL_ERROR "includes across the layers of ${DOC}:\n  ${_msg}")
endif()
list(REMOVE_DUPLICATES _edges)
list(SORT _edges)
list(JOIN _edges ", " _e)
list(LENGTH _files _n)
message(STATUS "layers: ${_n} files clean; includes between layers: ${_e}")
