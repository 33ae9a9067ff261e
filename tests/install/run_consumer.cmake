# Checks the installed package the way a user meets it: installs the geomopt build in GEOMOPT_BINARY_DIR into
# WORK_DIR/prefix, then configures, builds and runs the project in CONSUMER_SOURCE_DIR against that prefix alone.
#
#   cmake -D GEOMOPT_BINARY_DIR=... -D CONSUMER_SOURCE_DIR=... -D WORK_DIR=... [-D GENERATOR=Ninja]
#         [-D CXX_COMPILER=...] [-D CONFIG=Release] [-D MPIEXEC=... [-D MPIEXEC_FLAGS=...]] -P run_consumer.cmake
#
# MPIEXEC runs the distributed consumer at two ranks (MPIEXEC_FLAGS before the program: --oversubscribe for Open MPI
# on a one-core machine); without it the consumer runs as one process.

cmake_minimum_required(VERSION 3.21)

foreach(var IN ITEMS GEOMOPT_BINARY_DIR CONSUMER_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake: -D ${var}=... is required")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Release)
endif()

set(prefix "${WORK_DIR}/prefix")
set(build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")

function(run step)
  message(STATUS "install_consumer: ${step}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${step} failed (${result})")
  endif()
endfunction()

run("install geomopt into ${prefix}"
  "${CMAKE_COMMAND}" --install "${GEOMOPT_BINARY_DIR}" --prefix "${prefix}" --config "${CONFIG}")

set(configure_args -S "${CONSUMER_SOURCE_DIR}" -B "${build}" "-DCMAKE_BUILD_TYPE=${CONFIG}"
  "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(GENERATOR)
  list(APPEND configure_args -G "${GENERATOR}")
endif()
if(CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
run("configure the consumer" "${CMAKE_COMMAND}" ${configure_args})

# The package must come from the prefix just installed, not from the build tree or the system.
file(STRINGS "${build}/CMakeCache.txt" found_dir REGEX "^geomopt_DIR:")
string(REGEX REPLACE "^[^=]*=" "" found_dir "${found_dir}")
file(REAL_PATH "${found_dir}" found_dir)
file(REAL_PATH "${prefix}" real_prefix)
string(FIND "${found_dir}" "${real_prefix}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "install_consumer: geomopt was found in ${found_dir}, not under ${real_prefix}")
endif()

run("build the consumer" "${CMAKE_COMMAND}" --build "${build}" --config "${CONFIG}")

if(EXISTS "${build}/${CONFIG}/consumer${CMAKE_EXECUTABLE_SUFFIX}")
  set(consumer "${build}/${CONFIG}/consumer${CMAKE_EXECUTABLE_SUFFIX}")
else()
  set(consumer "${build}/consumer${CMAKE_EXECUTABLE_SUFFIX}")
endif()
run("run the consumer" "${consumer}")

# The libtorch consumer, built when the installed package has the libtorch component.
get_filename_component(consumer_dir "${consumer}" DIRECTORY)
if(EXISTS "${consumer_dir}/consumer_libtorch${CMAKE_EXECUTABLE_SUFFIX}")
  run("run the libtorch consumer" "${consumer_dir}/consumer_libtorch${CMAKE_EXECUTABLE_SUFFIX}")
endif()

# The distributed consumer, built when the installed package has the distributed component; run as root too (CI),
# which Open MPI's launcher refuses unless both variables say so.
if(EXISTS "${consumer_dir}/consumer_distributed${CMAKE_EXECUTABLE_SUFFIX}")
  set(program "${consumer_dir}/consumer_distributed${CMAKE_EXECUTABLE_SUFFIX}")
  if(MPIEXEC)
    set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
    set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
    run("run the distributed consumer at two ranks" "${MPIEXEC}" -n 2 ${MPIEXEC_FLAGS} "${program}")
  else()
    run("run the distributed consumer" "${program}")
  endif()
endif()
