"""What the benchmark runners share: markdown output, the benchmark tree a build was configured with, the results
file each runner can write for benchmarks/run_all, and the check that makes a broken benchmark fail."""
import json
import math
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED_SHAPES = ROOT.parent / "shared" / "bench" / "transformer369_d256.shapes"
SMALL_SHAPES = ROOT / "benchmarks" / "tree_small.shapes"


def table(header, rows):
    """Prints a markdown table and a blank line."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()


def read_shapes(path):
    """The leaves of a shapes file ("rows [cols]" per line, '#' comments), as tuples."""
    shapes = []
    for line in pathlib.Path(path).read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if fields:
            shapes.append(tuple(int(x) for x in fields))
    return shapes


def default_shapes():
    """The shared 369-leaf tree when it is beside the clone, else the small tree committed in benchmarks/."""
    return SHARED_SHAPES if SHARED_SHAPES.exists() else SMALL_SHAPES


def torch_tree(shapes, seed=1):
    """One float32 torch.nn.Parameter per shape, uniform in [-1, 1], each with a .grad drawn the same way: the tree
    and gradients the PyTorch-side benchmarks step. torch is imported here, so runners without it can use the rest."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    params = []
    for shape in shapes:
        p = torch.nn.Parameter(torch.rand(shape, generator=gen) * 2 - 1)
        p.grad = torch.rand(shape, generator=gen) * 2 - 1
        params.append(p)
    return params


def cmake_cache(build, key):
    """A value of BUILD/CMakeCache.txt, or None."""
    cache = pathlib.Path(build) / "CMakeCache.txt"
    if not cache.exists():
        return None
    for line in cache.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and name.split(":", 1)[0] == key:
            return value
    return None


def build_shapes(build, key="GEOMOPT_TREE369_SHAPES"):
    """The shapes file the build's benchmark tree was generated from (the binaries carry it compiled in)."""
    value = cmake_cache(build, key)
    if not value:
        sys.exit(f"{pathlib.Path(sys.argv[0]).name}: {build} has no {key} in its CMakeCache.txt; configure it with "
                 "-DGEOMOPT_BUILD_BENCHMARKS=ON")
    return pathlib.Path(value)


def describe_tree(path):
    """'the 369-leaf tree (20,153,696 floats, transformer369_d256.shapes)'."""
    shapes = read_shapes(path)
    floats = sum(math.prod(s) for s in shapes)
    return f"the {len(shapes)}-leaf tree ({floats:,} floats, {pathlib.Path(path).name})"


def require(condition, what):
    """Fails the run (exit 1) with `what` when a figure is missing or absurd, so a broken benchmark cannot pass."""
    if not condition:
        sys.exit(f"{pathlib.Path(sys.argv[0]).name}: bad output: {what}")


def positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def write_results(path, data):
    """The runner's figures as JSON, for benchmarks/run_all (its summary table and charts)."""
    if path:
        pathlib.Path(path).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
