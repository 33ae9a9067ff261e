# cmake -D CXX=<compiler> -D INCLUDES=<dir;dir> -D SOURCE=<file.cpp> -D EXPECT=<regex> -P run.cmake
# Passes when SOURCE fails to compile and the compiler's message matches EXPECT.
set(args -std=c++20 -fsyntax-only)
foreach(dir IN LISTS INCLUDES)
  list(APPEND args -I "${dir}")
endforeach()
execute_process(COMMAND "${CXX}" ${args} "${SOURCE}" RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must not")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "${SOURCE} failed to compile, but without a message matching '${EXPECT}':\n${err}")
endif()
message(STATUS "${SOURCE}: rejected as expected")
