# The installed Python package as a user meets it: installs the build in GEOMOPT_BINARY_DIR into WORK_DIR/prefix, then
# imports geomopt.torch from that prefix alone (PYTHONPATH=<prefix>/PYTHON_DIR, run from WORK_DIR so that no build or
# source tree stands in) and steps one Stiefel parameter: the extension finds geomopt's libraries by its run path.
#
#   cmake -D GEOMOPT_BINARY_DIR=... -D WORK_DIR=... -D PYTHON=... -D PYTHON_DIR=... -P installed.cmake

cmake_minimum_required(VERSION 3.21)
foreach(var IN ITEMS GEOMOPT_BINARY_DIR WORK_DIR PYTHON PYTHON_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "installed.cmake: -D ${var}=... is required")
  endif()
endforeach()

set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${GEOMOPT_BINARY_DIR}" --prefix "${prefix}"
  RESULT_VARIABLE result OUTPUT_QUIET)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "installed.cmake: installing into ${prefix} failed (${result})")
endif()

set(program [=[
import sys, torch, geomopt, geomopt.torch as gt
assert geomopt.__file__.startswith(sys.argv[1]), geomopt.__file__
w = gt.ManifoldParameter(torch.linalg.qr(torch.randn(8, 3))[0].T.contiguous(), manifold=geomopt.Stiefel())
w.grad = torch.randn(3, 8)
before = w.detach().clone()
gt.Adam([w], lr=0.1).step()
assert not torch.equal(before, w.detach())
assert (w @ w.T - torch.eye(3)).abs().max() < 1e-5
print("installed.cmake: geomopt.torch stepped from", geomopt.__file__)
]=])
execute_process(COMMAND "${CMAKE_COMMAND}" -E env "PYTHONPATH=${prefix}/${PYTHON_DIR}" --unset=GEOMOPT_STEP_TOOL
    "${PYTHON}" -c "${program}" "${prefix}"
  WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "installed.cmake: the installed package failed (${result})")
endif()
