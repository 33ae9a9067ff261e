#!/usr/bin/env bash
# Fuzzes geomopt::io's loader with libFuzzer for a fixed time: builds tests/io/fuzz_load.cpp and the io sources
# with clang++ -fsanitize=fuzzer,address,undefined in build/fuzz-io, writes a seed corpus of valid files with the
# same sources, then runs the target. Exits non-zero on any crash, uncaught exception, leak or sanitizer report.
# Without clang++ (or its libFuzzer runtime, Debian's libclang-rt-14-dev) it says so and exits 0.
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
mkdir -p "${out}"
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
    "${cxx}" -x c++ -fsanitize=fuzzer - -o "${out}/probe" 2>/dev/null; then
  echo "fuzz_io.sh: ${cxx} cannot link libFuzzer; the io fuzz run is skipped (install libclang-rt-14-dev)"
  exit 0
fi

hdf5_cflags=$(pkg-config --cflags hdf5 2>/dev/null || echo "-I/usr/include/hdf5/serial")
hdf5_flags=$(pkg-config --libs hdf5 2>/dev/null || echo "-L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5")
common=(-std=c++20 -O1 -g -fno-omit-frame-pointer -Iio/include -Iptree/include -Imanifolds/include
  -isystem /usr/include/eigen3)
sources=(io/src/common.cpp io/src/guard.cpp io/src/h5.cpp io/src/inspect.cpp io/src/read.cpp io/src/write.cpp)

echo "fuzz_io.sh: building with ${cxx}"
# Every source once, two at a time; the target and the seed writer share the io objects.
san=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
compile() {  # compile <source> <object> [flags...]
  local src="$1" obj="$2"
  shift 2
  # shellcheck disable=SC2086  # hdf5_cflags is a list of flags
  "${cxx}" "${common[@]}" "${san[@]}" -fsanitize=fuzzer-no-link ${hdf5_cflags} "$@" -c "${src}" -o "${obj}"
}
pids=()
objects=()
for src in "${sources[@]}" tests/io/fuzz_load.cpp; do
  obj="${out}/$(basename "${src}" .cpp).o"
  [[ "${src}" == tests/* ]] || objects+=("${obj}")
  compile "${src}" "${obj}" &
  pids+=($!)
  if ((${#pids[@]} == 2)); then
    wait "${pids[0]}"
    pids=("${pids[1]}")
  fi
done
compile tests/io/fuzz_load.cpp "${out}/fuzz_load_seeds.o" -DGEOMOPT_FUZZ_SEEDS
for pid in "${pids[@]}"; do wait "${pid}"; done
# shellcheck disable=SC2086  # hdf5_flags is a list of flags
"${cxx}" "${san[@]}" -fsanitize=fuzzer "${out}/fuzz_load.o" "${objects[@]}" ${hdf5_flags} -o "${out}/fuzz_load"
# shellcheck disable=SC2086
"${cxx}" "${san[@]}" "${out}/fuzz_load_seeds.o" "${objects[@]}" ${hdf5_flags} -o "${out}/fuzz_load_seeds"

rm -rf "${out}/seeds"
"${out}/fuzz_load_seeds" "${out}/seeds"
mkdir -p "${out}/corpus"

# HDF5 1.10 leaks some of its own allocations on the error paths of corrupt files; leaks anywhere else still fail.
printf 'leak:libhdf5_serial.so\nleak:libhdf5.so\n' > "${out}/lsan.supp"
export LSAN_OPTIONS="suppressions=${out}/lsan.supp:print_suppressions=0"

# The crash guard forks here (no geomopt-inspect beside the target): a child with the fuzzer's very heap.
export GEOMOPT_IO_CHECKER=

echo "fuzz_io.sh: fuzzing the loader for ${seconds} s"
"${out}/fuzz_load" -max_total_time="${seconds}" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="${out}/" "${out}/corpus" "${out}/seeds"
echo "fuzz_io.sh: no crash in ${seconds} s"
