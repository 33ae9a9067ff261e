#!/usr/bin/env bash
# Builds geomopt in Release and runs a short version of the flagship example, examples/fashion_mnist: three epochs
# of each configuration (free, Stiefel-constrained, attention on St(d, n)), about two minutes on two cores. It prints
# where the plot and the metrics are. Arguments are passed on (--epochs 10 for the full run, --help for the rest).
#
#   bash scripts/run_example.sh [fashion_mnist options]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install_deps.sh

cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG"
cmake --build build/release -j "${GEOMOPT_JOBS:-2}" --target fashion_mnist
exec build/release/examples/fashion_mnist --epochs 3 --out build/fashion_mnist "$@"
