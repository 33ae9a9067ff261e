#!/usr/bin/env bash
# Builds geomopt in Release and runs the flagship example, examples/manifolds_tour.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install_deps.sh

cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG"
cmake --build build/release -j "${GEOMOPT_JOBS:-2}" --target manifolds_tour
exec build/release/examples/manifolds_tour
