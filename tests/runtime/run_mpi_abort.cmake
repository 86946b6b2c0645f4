# Runs one MpiComm failure case of test_comm_mpi_abort.cpp:
#   cmake -DMPIEXEC=... -DFLAGS="..." -DEXE=... -DNP=4 -DCASE=throw|return|group|stop|timeout
#         [-DTIMEOUT=60] -P run_mpi_abort.cmake
# Passes when the job ends within TIMEOUT seconds with a non-zero exit code and prints every line
# the case expects (below); fails on a hang (timeout), a zero exit code or a missing line.
if(NOT DEFINED TIMEOUT)
  set(TIMEOUT 60)
endif()
if(NOT DEFINED CASE)
  set(CASE throw)
endif()
set(waiters "[02-9]|1[0-9]")  # the world ranks other than 1
set(barrier "barrier #2 on rank [0-9]+ of ${NP} in group 'world' \\(world rank (${waiters})\\)")
unset(ENV{CARTO_COLLECTIVE_TIMEOUT})
if(CASE STREQUAL "throw")
  # The failing rank's own line, and a waiting rank's naming its collective and the failure.
  set(expect
      "carto: world rank 1 of ${NP} failed: deliberate failure on rank 1; aborting the MPI job"
      "carto: world rank (${waiters}) of ${NP} failed: [a-z_]+ #[12] on rank [0-9]+ of ${NP} in group 'world' \\(world rank [0-9]+\\) cannot complete: world rank 1 failed: deliberate failure on rank 1; aborting")
elseif(CASE STREQUAL "return")
  set(expect
      "carto: world rank (${waiters}) of ${NP} failed: ${barrier} cannot complete: world rank 1 returned from its body after issuing 1 collective\\(s\\) on group 'world', without joining this one; aborting the MPI job")
elseif(CASE STREQUAL "group")
  set(expect
      "carto: world rank 0 of ${NP} failed: all_reduce #1 on rank 0 of 2 in group 'pair' \\(world rank 0\\) cannot complete: world rank 1 returned from its body after issuing 0 collective\\(s\\) on group 'pair', without joining this one; aborting the MPI job")
elseif(CASE STREQUAL "stop")
  set(ENV{CARTO_COLLECTIVE_TIMEOUT} 2)
  set(expect
      "carto: world rank (${waiters}) of ${NP} failed: ${barrier} did not complete within 2 s \\(CARTO_COLLECTIVE_TIMEOUT\\): a rank of the group is stopped, hung or still working; aborting the MPI job")
elseif(CASE STREQUAL "timeout")
  set(ENV{CARTO_COLLECTIVE_TIMEOUT} 1e400)
  set(expect
      "carto: world rank [0-9]+ of ${NP} failed: CARTO_COLLECTIVE_TIMEOUT is '1e400'; it takes a positive number of seconds up to 31536000 \\(e.g. 60 or 0.5\\), or leave it unset for no limit; aborting the MPI job")
else()
  message(FATAL_ERROR "unknown CASE '${CASE}': throw, return, group, stop or timeout")
endif()
separate_arguments(flags UNIX_COMMAND "${FLAGS}")
string(TIMESTAMP start "%s")
execute_process(COMMAND ${MPIEXEC} ${flags} -np ${NP} ${EXE} ${CASE}
                RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT ${TIMEOUT})
string(TIMESTAMP stop "%s")
math(EXPR seconds "${stop} - ${start}")
set(all "${out}${err}")
if(result MATCHES "timeout|Process terminated due to timeout")
  message(FATAL_ERROR "${CASE}: the job did not end within ${TIMEOUT} s:\n${all}")
endif()
if(result EQUAL 0)
  message(FATAL_ERROR "${CASE}: the job exited 0 although world rank 1 failed:\n${all}")
endif()
if(all MATCHES "passed the barrier")
  message(FATAL_ERROR "${CASE}: a rank passed the barrier that world rank 1 never joined:\n${all}")
endif()
foreach(line IN LISTS expect)
  if(NOT all MATCHES "${line}")
    message(FATAL_ERROR "${CASE}: no line matching\n  ${line}\nin:\n${all}")
  endif()
endforeach()
message(STATUS "mpi ${CASE}: the job ended in ${seconds} s with exit code ${result}")
