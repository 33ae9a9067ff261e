# The fault test: rank 1 of 3 is killed (SIGKILL) while the other ranks are inside a step
# (faults/kill_rank.cpp), after rank 0 saved a checkpoint.
#   (a) under mpirun's defaults, the job ends with a non-zero status well within the timeout, and mpirun names rank 1;
#   (b) with --enable-recovery (Open MPI 4.1: mpirun keeps the survivors running), each survivor throws TimeoutError
#       naming rank 1 and a path within the timeout and a slack, reports it and ends the job (MPI_Abort, status 3),
#       for GradientAverager::average and for ZeroRedundancyOptimizer::step; the job ends within the same bound, but
#       its status is not checked: Open MPI 4.1.4's mpirun exits with 0 under recovery even after MPI_Abort;
# and in both, the checkpoint saved before the fault loads and equals what was saved.
#
#   cmake -D MPIEXEC=<mpirun> -D "MPIEXEC_FLAGS=<flags>" -D EXE=<kill_rank> -D WORK=<dir> -D TIMEOUT=<s> \
#         -P kill_rank_test.cmake
cmake_minimum_required(VERSION 3.21)
file(REMOVE_RECURSE "${WORK}")
separate_arguments(flags UNIX_COMMAND "${MPIEXEC_FLAGS}")
# Slack over the timeout for a loaded two-core machine: start-up of 3 ranks, the abort, mpirun's own cleanup.
set(slack 40)
math(EXPR limit "${TIMEOUT} + ${slack}")

function(fail what output)
  message(FATAL_ERROR "${what}\n--- output ---\n${output}")
endfunction()

# run(<name> <mode> <status: NONZERO or ANY> <extra mpirun flags...>): runs the job, checks its status and duration;
# sets `output`.
function(run name mode expected_status)
  file(MAKE_DIRECTORY "${WORK}/${name}")
  string(TIMESTAMP t0 "%s")
  execute_process(COMMAND "${MPIEXEC}" -np 3 ${flags} ${ARGN} "${EXE}" ${mode} "${WORK}/${name}" ${TIMEOUT}
                  RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output TIMEOUT 110)
  string(TIMESTAMP t1 "%s")
  math(EXPR elapsed "${t1} - ${t0}")
  message("${name}: mpirun ${ARGN} ${mode}: status ${status} after about ${elapsed} s")
  if(NOT status MATCHES "^[0-9]+$" OR (expected_status STREQUAL "NONZERO" AND status EQUAL 0))
    fail("${name}: the job must end with a non-zero status, got \"${status}\"" "${output}")
  endif()
  if(elapsed GREATER limit)
    fail("${name}: the job took ${elapsed} s, more than the timeout ${TIMEOUT} s + ${slack} s" "${output}")
  endif()
  set(output "${output}" PARENT_SCOPE)
endfunction()

function(check_checkpoint name)
  execute_process(COMMAND "${EXE}" verify "${WORK}/${name}" RESULT_VARIABLE status OUTPUT_VARIABLE out
                  ERROR_VARIABLE out TIMEOUT 60)
  if(NOT status EQUAL 0)
    fail("${name}: the checkpoint saved before the fault is not intact" "${out}")
  endif()
  message("${name}: ${out}")
endfunction()

# Each survivor's report names rank 1 and a path, and says it waited about the timeout, not much longer.
function(check_survivors name operation path_pattern)
  foreach(rank 0 2)
    set(report_file "${WORK}/${name}/rank${rank}.txt")
    if(NOT EXISTS "${report_file}")
      fail("${name}: survivor ${rank} wrote no report" "${output}")
    endif()
    file(READ "${report_file}" report)
    message("${name}: rank ${rank}: ${report}")
    if(NOT report MATCHES "^TimeoutError after ([0-9.]+) s: ${operation}: the messages of rank 1 did not arrive")
      fail("${name}: survivor ${rank} did not report a TimeoutError naming rank 1 in ${operation}" "${report}")
    endif()
    set(waited "${CMAKE_MATCH_1}")
    if(waited LESS ${TIMEOUT} OR waited GREATER ${limit})
      fail("${name}: survivor ${rank} waited ${waited} s, expected the timeout ${TIMEOUT} s (+ ${slack} s)" "${report}")
    endif()
    if(NOT report MATCHES "from ${path_pattern}")
      fail("${name}: survivor ${rank}'s report names no path matching ${path_pattern}" "${report}")
    endif()
  endforeach()
endfunction()

# (a) The default launcher ends the job when rank 1 dies, and names it.
run(default average NONZERO)
if(NOT output MATCHES "rank 1")
  fail("default: mpirun's output does not name rank 1" "${output}")
endif()
check_checkpoint(default)

# (b) With recovery, the survivors run on into the timeout.
run(recovery average ANY --enable-recovery)
check_survivors(recovery "GradientAverager::average" "weight")
check_checkpoint(recovery)

run(recovery_zero zero ANY --enable-recovery)
check_survivors(recovery_zero "ZeroRedundancyOptimizer::step" "(weight|bias)")
