#!/usr/bin/env python3
"""Builds benchmarks/ptree_bench (Release, -O2) and prints its figures as ratios against references measured in the
same run, medians of several repetitions:

  flatten_into / memcpy      throughput of flatten_into on the 369-leaf tree over one std::memcpy of its bytes
                             (and over the same bytes copied by Eigen, a second reference)
  unflatten_into / memcpy    the same for unflatten_into (goal: >= 0.9 each)
  for_each, 369 leaves 2x2   nanoseconds per leaf (goal: <= 3), beside a plain loop over std::vector<MatrixXf>

usage: benchmarks/run_ptree.py [--build DIR] [--repetitions N]
"""
import argparse
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build" / "bench"))
    ap.add_argument("--repetitions", type=int, default=9)
    args = ap.parse_args()

    build = pathlib.Path(args.build)
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DGEOMOPT_BUILD_BENCHMARKS=ON", "-DGEOMOPT_BUILD_TESTS=OFF", "-DGEOMOPT_BUILD_EXAMPLES=OFF"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build), "--target", "ptree_bench"], check=True, stdout=subprocess.DEVNULL)
    exe = build / "benchmarks" / "ptree_bench"
    if not exe.exists():
        sys.exit("run_ptree.py: ptree_bench was not built (is ../shared/bench there?)")
    out = subprocess.run([str(exe), f"--benchmark_repetitions={args.repetitions}", "--benchmark_format=json",
                          "--benchmark_report_aggregates_only=true"], check=True, capture_output=True, text=True)
    rows = {b["run_name"]: b for b in json.loads(out.stdout)["benchmarks"] if b.get("aggregate_name") == "median"}

    def rate(name):
        return rows[name]["bytes_per_second"]

    def ns_per_leaf(name):
        return rows[name]["ns_per_leaf"] * 1e9  # the counter is in seconds per leaf

    print(f"ptree_bench, {args.repetitions} repetitions, medians")
    print(f"std::memcpy of the 369-leaf tree's bytes: {rate('BM_memcpy') / 1e9:6.2f} GB/s")
    print(f"Eigen copy of the same bytes:             {rate('BM_eigen_copy') / 1e9:6.2f} GB/s")
    for walk in ("flatten_into", "unflatten_into"):
        r = rate(f"BM_{walk}")
        print(f"{walk:<15} {r / 1e9:6.2f} GB/s   ratio to memcpy: {r / rate('BM_memcpy'):.2f}   "
              f"to the Eigen copy: {r / rate('BM_eigen_copy'):.2f}")
    print(f"for_each over 369 leaves of 2x2: {ns_per_leaf('BM_for_each_2x2'):.2f} ns/leaf "
          f"(plain loop over std::vector<MatrixXf>: {ns_per_leaf('BM_loop_2x2'):.2f} ns/leaf)")


if __name__ == "__main__":
    main()
