#!/usr/bin/env bash
# Makes `import geomopt` and `import geomopt.torch` work for Debian's /usr/bin/python3: installs the packages it needs
# (scripts/install_deps.sh), builds the libraries and the Python package in Release (build/python-install: no tests,
# no examples) and installs both under a prefix, /usr/local by default (the package into
# <prefix>/lib/python3.X/dist-packages/geomopt, which Debian's python3 searches, with a run path to the libraries).
#
#   bash scripts/install_python.sh [prefix]      (as root for /usr/local; GEOMOPT_JOBS=N for the parallelism)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
prefix="${1:-/usr/local}"

bash scripts/install_deps.sh
cmake -S . -B build/python-install -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DPython3_EXECUTABLE=/usr/bin/python3 -DGEOMOPT_BUILD_PYTHON=ON -DGEOMOPT_BUILD_TESTS=OFF \
  -DGEOMOPT_BUILD_EXAMPLES=OFF -DCMAKE_INSTALL_PREFIX="${prefix}"
cmake --build build/python-install -j "${GEOMOPT_JOBS:-2}"
cmake --install build/python-install
# From another directory, so that the clone's python/ cannot stand in for the installed package.
(cd / && /usr/bin/python3 -c "import geomopt, geomopt.torch; print('geomopt installed in', geomopt.__path__[0])")
