#!/usr/bin/env bash
# Builds and runs every test: first a Release build by g++ with warnings as errors (plus the install/consumer test
# and the Python package's pytest files), then the same C++ suite under AddressSanitizer and UndefinedBehaviorSanitizer
# (not the Python package: its interpreter would need the sanitizers' runtime preloaded), built by clang++ (-O0 -g1:
# the manifold property suite compiles 40 % faster than at -O1, and sanitizers need no optimisation; clang++ 14
# compiles the sanitized optimizer_test.cpp in 86 CPU s, g++ 12 in 163, docs/design.md). The sanitizer stage also
# fuzzes the io loader for 25 s (test io_fuzz_load, libFuzzer: the same run as scripts/fuzz_io.sh). The Release stage
# also builds the benchmarks and runs each once in quick mode (tests bench_quick/<name>, benchmarks/run_all --quick),
# so none of them rots. Exits non-zero on the first failure.
#
#   bash scripts/test.sh        (GEOMOPT_JOBS=N to change the parallelism, default 2)
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs="${GEOMOPT_JOBS:-2}"
stage="install_deps"
trap 'echo "test.sh: FAILED during ${stage}" >&2' ERR

bash scripts/install_deps.sh

# build_and_test <name> <cmake args...>: configure build/<name> with Ninja, build it, run its tests.
build_and_test() {
  local dir="build/$1"
  shift
  stage="configure ${dir}"
  cmake -S . -B "${dir}" -G Ninja -DGEOMOPT_WERROR=ON "$@"
  stage="build ${dir}"
  cmake --build "${dir}" -j "${jobs}"
  stage="ctest ${dir}"
  ctest --test-dir "${dir}" --output-on-failure -j "${jobs}"
}

echo "== Release (g++, -O2, warnings as errors, benchmarks in quick mode) =="
# The benchmarks are built on the small committed tree, wherever ../shared is, and run as bench_quick/<name>.
small_tree="${PWD}/benchmarks/tree_small.shapes"
# The Python package is built for Debian's interpreter, the one that sees python3-torch, and tested by pytest here.
build_and_test release -DCMAKE_CXX_COMPILER=g++ -DCMAKE_C_COMPILER=gcc -DPython3_EXECUTABLE=/usr/bin/python3 \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DGEOMOPT_BUILD_BENCHMARKS=ON -DGEOMOPT_TREE369_SHAPES="${small_tree}" -DGEOMOPT_IO_BENCH_SHAPES="${small_tree}"

echo "== ASan + UBSan (clang++, -O0, assertions on) =="
export ASAN_OPTIONS="detect_leaks=1"
# HDF5 1.10 leaks some of its own allocations on the error paths of corrupt files (the io tests and the fuzzer feed it
# such files); leaks with no HDF5 frame still fail.
export LSAN_OPTIONS="suppressions=${PWD}/tests/io/fuzz_lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1"
# geomopt::libtorch is left to the Release stage: libtorch 1.13's own headers do not compile under clang 14 in C++20
# (std::vector<c10::IValue> of an incomplete type, in ATen/core/List.h).
# The sanitized test programs are about 120 MB each (debug lines, instrumentation, Ceres linked statically): LLVM's
# linker writes one in a quarter of the time GNU ld takes.
build_and_test asan -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
  -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1" \
  -DGEOMOPT_SANITIZE=ON -DGEOMOPT_TEST_INSTALL=OFF -DGEOMOPT_BUILD_PYTHON=OFF -DGEOMOPT_BUILD_LIBTORCH=OFF

echo "test.sh: all tests passed (Release and ASan+UBSan)"
