"""pytest's setup for geomopt's Python tests: the package comes from the build tree (PYTHONPATH, set by CTest), the
references from Debian's python3-torch; threads are pinned to one so timings and reductions do not vary."""

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)
