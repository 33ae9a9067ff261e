# A run interrupted after epoch 1 and continued with --resume must end exactly where an uninterrupted run ends: every
# row of metrics.csv (each configuration's epochs: losses, accuracies, step, defect; not the timings) is the same in
# both.
#
#   cmake -D EXE=<fashion_mnist> -D WORK=<dir> -D "ARGS=<options>" -P resume_test.cmake
cmake_minimum_required(VERSION 3.21)
separate_arguments(args UNIX_COMMAND "${ARGS}")
file(REMOVE_RECURSE "${WORK}")

function(run out_dir)
  execute_process(COMMAND "${EXE}" ${args} --out "${WORK}/${out_dir}" ${ARGN}
                  RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
  message("${output}")
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "fashion_mnist ${ARGN} exited with ${status}")
  endif()
  set(output "${output}" PARENT_SCOPE)
endfunction()

# The rows of metrics.csv without their two timing columns (train_seconds, samples_per_second), sorted: the resumed
# run writes them in another order (every configuration's first epoch, then the second ones).
function(rows_without_timings dir result)
  file(STRINGS "${WORK}/${dir}/metrics.csv" rows)
  list(LENGTH rows count)
  if(count LESS 3)
    message(FATAL_ERROR "${WORK}/${dir}/metrics.csv has ${count} lines, expected a header and two epochs")
  endif()
  list(REMOVE_AT rows 0)
  set(stripped "")
  foreach(row IN LISTS rows)
    string(REPLACE "," ";" fields "${row}")
    list(REMOVE_AT fields 7 8)
    list(JOIN fields "," row)
    list(APPEND stripped "${row}")
  endforeach()
  list(SORT stripped)
  set(${result} "${stripped}" PARENT_SCOPE)
endfunction()

run(straight --epochs 2)
run(interrupted --epochs 2 --stop-after 1)
run(interrupted --epochs 2 --resume)
if(NOT output MATCHES "resumed from [^\n]* after epoch 1 \\(step [0-9]+\\)")
  message(FATAL_ERROR "the second run did not resume from epoch 1")
endif()
rows_without_timings(straight expected)
rows_without_timings(interrupted got)
if(NOT expected STREQUAL got)
  string(REPLACE ";" "\n  " got "${got}")
  string(REPLACE ";" "\n  " expected "${expected}")
  message(FATAL_ERROR "resumed run ended with\n  ${got}\nthe uninterrupted run with\n  ${expected}")
endif()
string(REPLACE ";" "\n  " got "${got}")
message("resume: every epoch matches the uninterrupted run:\n  ${got}")
