#!/usr/bin/env python3
"""Runs the distributed benchmarks under mpirun at several rank counts and prints their figures as ratios against
references measured in the same run:

  averaging        GradientAverager::average of the benchmark tree (float32) against one MPI_Allreduce of the same
                   bytes in place (Open MPI's own algorithm), median of the repetitions; the ratio is the averager's
                   speed over MPI_Allreduce's (goal: >= 0.9)
  sharded state    ZeroRedundancyOptimizer's state bytes on the fullest rank against 1/P of the unsharded state's,
                   under Adam and under Muon (matrices whole on their owners); the ownership plan's load max/mean
                   (goal under Muon: <= 1.1); the sharded step's time against averaging + the unsharded step

Every rank runs on this machine (loopback, --oversubscribe when P exceeds the cores), so the times are those of
ranks sharing its cores; the ratios compare two ways of doing the same work on the same ranks.

usage: benchmarks/run_distributed.py [--build DIR] [--shapes FILE] [--ranks 2,3,4] [--reps N] [--quick] [--json F]
  --quick   benchmarks/tree_small.shapes, P = 2, 3 repetitions: a smoke run that still checks every figure
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys

from bench_markdown import ROOT, SMALL_SHAPES, build_shapes, describe_tree, positive, require, table, write_results


def mpirun(ranks, cmd):
    """Runs cmd at `ranks` ranks; the launcher may run as root (CI does) and oversubscribe this machine's cores."""
    launcher = shutil.which("mpirun") or shutil.which("mpiexec")
    require(launcher, "no mpirun on PATH")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    full = [launcher, "-np", str(ranks), "--oversubscribe", *map(str, cmd)]
    print("run_distributed: " + " ".join(full), file=sys.stderr, flush=True)
    out = subprocess.run(full, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        sys.exit(f"run_distributed.py: {' '.join(full)} exited with {out.returncode}")
    return out.stdout


def number(pattern, text, what):
    m = re.search(pattern, text)
    require(m, f"{what}: not in the output")
    return float(m.group(1))


def averaging(exe, ranks, shapes, reps):
    out = mpirun(ranks, [exe, shapes, reps])
    average = number(r"GradientAverager::average\s+([\d.]+) ms", out, "average time")
    allreduce = number(r"MPI_Allreduce, same bytes\s+([\d.]+) ms", out, "MPI_Allreduce time")
    sent = number(r"sends ([\d.]+) MB per rank", out, "bytes sent")
    require(positive(average) and positive(allreduce), "averaging times")
    return {"average_ms": average, "allreduce_ms": allreduce, "sent_mb": sent, "ratio": allreduce / average}


def sharded(exe, ranks, shapes, reps):
    out = mpirun(ranks, [exe, shapes, reps])
    found = {}
    for name in ("Adam", "Muon"):
        block = re.search(rf"^{name}, P = {ranks}: (.*?)(?=^\S|\Z)", out, re.M | re.S)
        require(block, f"{name} at P = {ranks}: no report")
        text = block.group(0)
        row = {"load": number(r"load max/mean ([\d.]+)", text, f"{name} load"),
               "units": int(number(r"(\d+) units", text, f"{name} units")),
               "whole_bytes": number(r"whole (\d+), whole / P", text, f"{name} state bytes"),
               "state_over_share": number(r"max / \(whole / P\) ([\d.]+)", text, f"{name} state ratio"),
               "sent_mb": number(r"sent per step by rank 0: ([\d.]+) MB", text, f"{name} bytes sent"),
               "step_ms": number(r"step ([\d.]+) ms, average", text, f"{name} step"),
               "reference_ms": number(r"average \+ step ([\d.]+) ms", text, f"{name} reference")}
        require(positive(row["step_ms"]) and positive(row["reference_ms"]), f"{name}: step times")
        row["ratio"] = row["reference_ms"] / row["step_ms"]
        found[name] = row
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build" / "bench"))
    ap.add_argument("--shapes", help="the tree (default: the build's GEOMOPT_TREE369_SHAPES)")
    ap.add_argument("--ranks", default="2,3,4")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    build = pathlib.Path(args.build)
    shapes = pathlib.Path(args.shapes) if args.shapes else build_shapes(build)
    ranks = [int(r) for r in args.ranks.split(",")]
    if args.quick:
        shapes, ranks, args.reps = SMALL_SHAPES, [2], 3
    exes = {n: build / "benchmarks" / n for n in ("distributed_average_bench", "distributed_zero_bench")}
    for name, exe in exes.items():
        require(exe.exists(), f"{exe} was not built (MPI found? GEOMOPT_BUILD_BENCHMARKS=ON?)")

    results = {"tree": describe_tree(shapes), "reps": args.reps, "ranks": ranks, "averaging": {}, "sharded": {}}
    for P in ranks:
        results["averaging"][str(P)] = averaging(exes["distributed_average_bench"], P, shapes, args.reps)
        results["sharded"][str(P)] = sharded(exes["distributed_zero_bench"], P, shapes, max(3, args.reps // 2))

    print(f"Tree: {results['tree']}, float32; median of {args.reps} repetitions (averaging) and of "
          f"{max(3, args.reps // 2)} (steps).\n")
    print("**Gradient averaging** against one `MPI_Allreduce` of the same bytes (ratio: the averager's speed over "
          "MPI_Allreduce's; goal >= 0.9):\n")
    table(["P", "GradientAverager::average", "MPI_Allreduce", "sent per rank", "ratio"],
          [[str(P), f"{a['average_ms']:.2f} ms", f"{a['allreduce_ms']:.2f} ms", f"{a['sent_mb']:.1f} MB",
            f"{a['ratio']:.2f}"] for P, a in results["averaging"].items()])
    print("**Sharded state** (ZeroRedundancyOptimizer): the fullest rank's state against 1/P of the unsharded "
          "state's bytes, the plan's load max/mean (goal under Muon: <= 1.1), and the sharded step against "
          "averaging + the unsharded step on every rank (ratio > 1: the sharded step is faster):\n")
    rows = []
    for P, by in results["sharded"].items():
        for name, r in by.items():
            rows.append([name, P, str(r["units"]), f"{r['load']:.4f}", f"{r['state_over_share']:.3f}",
                         f"{r['sent_mb']:.1f} MB", f"{r['step_ms']:.1f} ms", f"{r['reference_ms']:.1f} ms",
                         f"{r['ratio']:.2f}"])
    table(["optimizer", "P", "units", "load max/mean", "state max / (whole / P)", "sent by rank 0", "sharded step",
           "average + step", "ratio"], rows)
    write_results(args.json, results)


if __name__ == "__main__":
    main()
