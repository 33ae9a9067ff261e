#!/usr/bin/env bash
# Builds geomopt in Release and runs a short version of the flagship example, examples/fashion_mnist: three epochs
# of free, Stiefel-constrained and attention networks by Adam and of the free and Stiefel ones by Muon and manifold
# Muon: 7.5 minutes with GEOMOPT_JOBS=1 from a clean build/release, 4 of them training (docs/examples.md).
# attention_muon (one more minute) runs only when asked for: --configs attention_muon, or all six by name. It prints
# where the plot and the metrics are. Arguments are passed on and override these (--epochs 10 for the full run,
# --help for the rest).
#
#   bash scripts/run_example.sh [fashion_mnist options]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install_deps.sh

cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DPython3_EXECUTABLE=/usr/bin/python3
cmake --build build/release -j "${GEOMOPT_JOBS:-2}" --target fashion_mnist
exec build/release/examples/fashion_mnist --epochs 3 --configs free,stiefel,attention,muon,manifold_muon --out build/fashion_mnist "$@"
