# Runs the MPI abort test: `cmake -DMPIEXEC=... -DFLAGS="..." -DEXE=... -DNP=4 -P run_mpi_abort.cmake`.
# Passes when the job ends within TIMEOUT seconds with a non-zero exit code and prints the failing
# rank's line; fails on a hang (timeout), a zero exit code or a missing line.
if(NOT DEFINED TIMEOUT)
  set(TIMEOUT 60)
endif()
separate_arguments(flags UNIX_COMMAND "${FLAGS}")
string(TIMESTAMP start "%s")
execute_process(COMMAND ${MPIEXEC} ${flags} -np ${NP} ${EXE}
                RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT ${TIMEOUT})
string(TIMESTAMP stop "%s")
math(EXPR seconds "${stop} - ${start}")
set(all "${out}${err}")
if(result MATCHES "timeout|Process terminated due to timeout")
  message(FATAL_ERROR "the job did not end within ${TIMEOUT} s after a rank failed:\n${all}")
endif()
if(result EQUAL 0)
  message(FATAL_ERROR "the job exited 0 although world rank 1 failed:\n${all}")
endif()
if(NOT all MATCHES "carto: world rank 1 of ${NP} failed: deliberate failure on rank 1; aborting the MPI job")
  message(FATAL_ERROR "no line naming the failing rank and its message:\n${all}")
endif()
message(STATUS "mpi abort: the job ended in ${seconds} s with exit code ${result}, naming rank 1")
