#!/usr/bin/env bash
# Installs the Debian 12 packages geomopt needs to build, test and run its examples.
# Idempotent: when every package is already present it installs nothing and touches no package list.
#
#   scripts/install_deps.sh            build + test dependencies, the Python package's among them
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libeigen3-dev        # Eigen 3.4: every component
  libceres-dev         # Ceres 2.1: ceres::Jet in ptree tests, the Ceres adapter
  libhdf5-dev          # HDF5 1.10: io (private dependency)
  doctest-dev          # doctest 2.4: the test framework
  libbenchmark-dev     # Google Benchmark: benchmarks/
  libgtest-dev libgmock-dev  # only for Ceres's manifold invariant checks
  python3-numpy python3-h5py  # io: tests/io/interop.py reads and writes files with h5py (/usr/bin/python3)
  clang libclang-rt-14-dev    # io: scripts/fuzz_io.sh (libFuzzer, ASan, UBSan)
  lld                         # scripts/test.sh links the sanitized tests with it: 2.7 s a program against bfd's 11
  dataset-fashion-mnist zlib1g-dev  # examples/fashion_mnist: the data (gzip IDX files) and zlib to read them
  gnuplot-nox                 # the plots of examples/fashion_mnist and benchmarks/run_all
  python3-dev pybind11-dev    # the Python package (python/): its extension, for Debian's /usr/bin/python3
  python3-torch python3-pytest  # geomopt.torch and its tests; PyTorch is also the reference of the optimizer benchmark
  libtorch-dev                # geomopt::libtorch (trees over torch::nn::Module tensors), its test, examples/libtorch_mlp
  openmpi-bin libopenmpi-dev  # geomopt::distributed (built when CMake finds MPI) and its tests, run under mpirun
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "install_deps.sh: missing packages: ${missing[*]}; run as root (or with sudo) to install them" >&2
  exit 1
fi

echo "install_deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
