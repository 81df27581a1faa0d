# Runs one Spin model check: spin -a, compile the verifier (pan), run it, and compare the error
# count with what is expected. Called by CTest:
#   cmake -DSPIN=<spin> -DCC=<c compiler> -DMODEL=<file.pml> -DWORKDIR=<dir> "-DDEFINES=-DX=1 -DY"
#         -DEXPECT=pass|fail -P spin_check.cmake
# EXPECT=fail is for mutants of the model: it shows that the check can fail at all.
foreach(v SPIN CC MODEL WORKDIR EXPECT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "spin_check: ${v} not set")
  endif()
endforeach()
separate_arguments(DEFINES UNIX_COMMAND "${DEFINES}")
file(REMOVE_RECURSE "${WORKDIR}")
file(MAKE_DIRECTORY "${WORKDIR}")
execute_process(COMMAND "${SPIN}" ${DEFINES} -a "${MODEL}" WORKING_DIRECTORY "${WORKDIR}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "spin -a failed (${rc}):\n${out}")
endif()
execute_process(COMMAND "${CC}" -O1 -DSAFETY -w -o pan pan.c WORKING_DIRECTORY "${WORKDIR}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compiling pan.c failed (${rc}):\n${out}")
endif()
execute_process(COMMAND ./pan -m1000000 WORKING_DIRECTORY "${WORKDIR}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(out MATCHES "max search depth too small")
  message(FATAL_ERROR "the search was truncated: raise -m")
endif()
if(NOT out MATCHES "errors: ([0-9]+)")
  message(FATAL_ERROR "could not find the error count in pan's output")
endif()
set(errors ${CMAKE_MATCH_1})
if(EXPECT STREQUAL "pass" AND NOT errors EQUAL 0)
  message(FATAL_ERROR "the model has ${errors} error(s): see ${WORKDIR}/*.trail (spin -t -p ${MODEL})")
elseif(EXPECT STREQUAL "fail" AND errors EQUAL 0)
  message(FATAL_ERROR "the mutant was not caught: the model no longer detects the bug it plants")
endif()
