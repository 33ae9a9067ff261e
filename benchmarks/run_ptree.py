#!/usr/bin/env python3
"""Runs benchmarks/ptree_bench (Release) and prints its figures as ratios against references measured in the same
run, medians of several repetitions:

  flatten_into / memcpy      throughput of flatten_into on the benchmark tree over one std::memcpy of its bytes
                             (and over the same bytes copied by Eigen, a second reference)
  unflatten_into / memcpy    the same for unflatten_into (goal: >= 0.9 each)
  for_each, leaves of 2x2    nanoseconds per leaf (goal: <= 3), beside a plain loop over std::vector<MatrixXf>

The tree is the one the build was configured with (GEOMOPT_TREE369_SHAPES: the shared 369-leaf tree, or
benchmarks/tree_small.shapes where that is missing). Without --no-build the script configures and builds the
ptree_bench target in --build first.

usage: benchmarks/run_ptree.py [--build DIR] [--no-build] [--repetitions N] [--quick] [--json FILE]
  --quick   1 repetition of 10 ms per benchmark: a smoke run that still checks every figure
"""
import argparse
import json
import pathlib
import subprocess
import sys

from bench_markdown import ROOT, build_shapes, describe_tree, positive, require, table, write_results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build" / "bench"))
    ap.add_argument("--no-build", action="store_true", help="use the binary already in --build")
    ap.add_argument("--repetitions", type=int, default=9)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.quick:
        args.repetitions = 1

    build = pathlib.Path(args.build)
    if not args.no_build:
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                        "-DGEOMOPT_BUILD_BENCHMARKS=ON", "-DGEOMOPT_BUILD_TESTS=OFF", "-DGEOMOPT_BUILD_EXAMPLES=OFF"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", str(build), "--target", "ptree_bench"], check=True,
                       stdout=subprocess.DEVNULL)
    exe = build / "benchmarks" / "ptree_bench"
    if not exe.exists():
        sys.exit(f"run_ptree.py: {exe} does not exist; build the ptree_bench target first")
    cmd = [str(exe), f"--benchmark_repetitions={args.repetitions}", "--benchmark_format=json",
           "--benchmark_report_aggregates_only=true"]
    if args.quick:
        cmd.append("--benchmark_min_time=0.01")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    # One repetition reports no aggregates, only the run itself.
    rows = {b["run_name"]: b for b in json.loads(out.stdout)["benchmarks"]
            if b.get("aggregate_name") == "median" or (args.repetitions == 1 and b.get("run_type") == "iteration")}
    for name in ("BM_memcpy", "BM_eigen_copy", "BM_flatten_into", "BM_unflatten_into"):
        require(positive(rows.get(name, {}).get("bytes_per_second")), f"{name}: no bytes_per_second")
    for name in ("BM_for_each_2x2", "BM_loop_2x2"):
        require(positive(rows.get(name, {}).get("ns_per_leaf")), f"{name}: no ns_per_leaf")

    def rate(name):
        return rows[name]["bytes_per_second"]

    def ns_per_leaf(name):
        return rows[name]["ns_per_leaf"] * 1e9  # the counter is in seconds per leaf

    memcpy, eigen = rate("BM_memcpy"), rate("BM_eigen_copy")
    results = {
        "tree": describe_tree(build_shapes(build)), "repetitions": args.repetitions,
        "gbps": {w: rate(f"BM_{w}") / 1e9 for w in ("memcpy", "eigen_copy", "flatten_into", "unflatten_into")},
        "ratio": {"flatten_into / memcpy": rate("BM_flatten_into") / memcpy,
                  "unflatten_into / memcpy": rate("BM_unflatten_into") / memcpy},
        "ns_per_leaf": {"for_each": ns_per_leaf("BM_for_each_2x2"), "loop": ns_per_leaf("BM_loop_2x2")},
    }
    print(f"ptree_bench on {results['tree']}, {args.repetitions} repetition(s), medians.")
    print()
    table(["figure", "value", "ratio to memcpy", "ratio to the Eigen copy", "goal"], [
        ["std::memcpy of the tree's bytes (reference)", f"{memcpy / 1e9:.2f} GB/s", "1", f"{memcpy / eigen:.2f}", ""],
        ["Eigen copy of the same bytes (second reference)", f"{eigen / 1e9:.2f} GB/s", f"{eigen / memcpy:.2f}", "1",
         ""],
        *([f"`{w}`", f"{rate(f'BM_{w}') / 1e9:.2f} GB/s", f"**{rate(f'BM_{w}') / memcpy:.2f}**",
           f"{rate(f'BM_{w}') / eigen:.2f}", ">= 0.9"] for w in ("flatten_into", "unflatten_into")),
    ])
    fe, lp = results["ns_per_leaf"]["for_each"], results["ns_per_leaf"]["loop"]
    table(["figure", "ns per leaf", "ratio to the loop", "goal"], [
        ["`for_each` over the tree's leaves, each 2x2", f"**{fe:.2f}**", f"{fe / lp:.2f}", "<= 3 ns/leaf"],
        ["plain loop over std::vector<MatrixXf> of as many 2x2 (reference)", f"{lp:.2f}", "1", ""],
    ])
    write_results(args.json, results)


if __name__ == "__main__":
    main()
