# cmake -D CXX=<compiler> -D INCLUDES=<dir;dir> -D SOURCE=<file.cpp> -D EXPECT=<regex> [-D MAX_LINES=<n>] -P run.cmake
# Passes when SOURCE fails to compile, the compiler's first error (its first line containing "error:") matches
# EXPECT, and, with MAX_LINES, the compiler prints fewer than MAX_LINES lines in all.
set(args -std=c++20 -fsyntax-only)
foreach(dir IN LISTS INCLUDES)
  list(APPEND args -I "${dir}")
endforeach()
execute_process(COMMAND "${CXX}" ${args} "${SOURCE}" RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must not")
endif()
set(all "${out}${err}")
string(REGEX MATCH "[^\n]*error:[^\n]*" first "${all}")
if(NOT first MATCHES "${EXPECT}")
  message(FATAL_ERROR "${SOURCE} failed to compile, but its first error does not match '${EXPECT}':\n${first}\n\n"
                      "The whole output:\n${all}")
endif()
string(REGEX MATCHALL "\n" newlines "${all}")
list(LENGTH newlines lines)
if(DEFINED MAX_LINES AND NOT lines LESS MAX_LINES)
  message(FATAL_ERROR "${SOURCE} failed to compile as expected, but in ${lines} lines (fewer than ${MAX_LINES} "
                      "wanted):\n${all}")
endif()
message(STATUS "${SOURCE}: rejected as expected, first error: ${first} (${lines} lines)")
