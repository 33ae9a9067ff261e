#!/usr/bin/env bash
# Fuzzes geomopt::io's loader with libFuzzer for a fixed time: configures build/fuzz-io with clang++, ASan and UBSan
# (-O1 -g), builds the fuzz target tests/io/fuzz_load.cpp and its seed writer there (tests/CMakeLists.txt), and runs
# the CTest test io_fuzz_load for SECONDS, the same test scripts/test.sh's ASan stage runs for 25 s. Exits non-zero on
# any crash, uncaught exception, leak or sanitizer report. Without clang++ (or its libFuzzer runtime, Debian's
# libclang-rt-14-dev) it says so and exits 0.
#
#   bash scripts/fuzz_io.sh [SECONDS]      (default 25; GEOMOPT_FUZZ_SECONDS also sets it)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds="${1:-${GEOMOPT_FUZZ_SECONDS:-25}}"
out="build/fuzz-io"
cxx="${GEOMOPT_FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}"
if [[ -z "${cxx}" ]]; then
  echo "fuzz_io.sh: clang++ not found; the io fuzz run is skipped (install clang and libclang-rt-14-dev)"
  exit 0
fi

# The C compiler only probes HDF5 (io enables C for FindHDF5); take the clang beside clang++.
cmake -S . -B "${out}" -G Ninja -DCMAKE_CXX_COMPILER="${cxx}" -DCMAKE_C_COMPILER="${cxx/clang++/clang}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DGEOMOPT_SANITIZE=ON \
  -DGEOMOPT_BUILD_EXAMPLES=OFF -DGEOMOPT_TEST_INSTALL=OFF -DGEOMOPT_FUZZ_SECONDS="${seconds}" >/dev/null
if ! grep -q '^GEOMOPT_HAVE_LIBFUZZER:INTERNAL=1$' "${out}/CMakeCache.txt"; then
  echo "fuzz_io.sh: ${cxx} cannot link libFuzzer; the io fuzz run is skipped (install libclang-rt-14-dev)"
  exit 0
fi

echo "fuzz_io.sh: building with ${cxx}"
cmake --build "${out}" --target io_fuzz_load io_fuzz_seeds

echo "fuzz_io.sh: fuzzing the loader for ${seconds} s"
ctest --test-dir "${out}" -R '^io_fuzz_' --output-on-failure --verbose
echo "fuzz_io.sh: no crash in ${seconds} s"
