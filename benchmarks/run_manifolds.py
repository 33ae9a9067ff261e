#!/usr/bin/env python3
"""Runs benchmarks/manifolds_bench (built beforehand; this script builds nothing) and prints its tables, medians of
several repetitions, every ratio taken within one run:

  per-call time of a retraction on St(N, 16), N = 64, 256, 1024, 4096, Cayley and geodesic, by three routes:
    implicit      geomopt::retract with SectionPolicy::recomputed (Householder section rebuilt), O(N n^2)
    transported   geomopt::retract with SectionPolicy::transported (dense N x N section moved), O(N^2 n)
    dense         Omega = lambda X lambda^T, then Eigen's exp(Omega) Y or the LU Cayley solve, O(N^3)
    dense_f       the same with Omega formed beforehand: f(Omega) Y alone, O(N^3)
  the ratio of each route's time from N to 4N (linear: 4, quadratic: 16, cubic: 64), the speed-up of the implicit
  route over the dense one, the (2n) x (2n) core function alone, and lift(x, section, egrad) for both policies.

The main run pins glibc's malloc thresholds (--pinned_malloc, see manifolds_bench.cpp) so that the figures are the
arithmetic's, and interleaves the repetitions of all benchmarks in random order, so that a noisy stretch of the shared
machine spreads over many rows instead of shifting all repetitions of one. A second run times the implicit route and
the Householder lift under glibc's default thresholds in a fresh process (repetitions in order), where large
temporaries can cost page faults. Then the accuracy experiment (--accuracy) prints its
table: the library's orthonormal factorisation of the lift against the non-orthogonal U, V factors.

usage: /usr/bin/python3 benchmarks/run_manifolds.py [--exe PATH | --build DIR] [--repetitions N] [--min-time S]
                                                    [--dense-max-n N] [--draws K] [--skip-accuracy] [--quick]
                                                    [--json FILE]
  --quick: N = 64 and 256 only, 1 repetition of 5 ms per benchmark, 1 draw per accuracy row; every figure checked
e.g.   cmake --build /tmp/build_bench --target manifolds_bench
       /usr/bin/python3 benchmarks/run_manifolds.py --build /tmp/build_bench --repetitions 9
"""
import argparse
import json
import pathlib
import subprocess
import sys

from bench_markdown import ROOT, positive, require, table, write_results

SIZES = (64, 256, 1024, 4096)
QUICK_SIZES = (64, 256)
KINDS = ("cayley", "geodesic")
ROUTES = ("implicit", "transported", "dense", "dense_f")


def run_json(exe, args, flags, interleave):
    if args.quick:
        flags = flags + [f"--benchmark_filter={args.filter}"]
    cmd = [str(exe), *flags, f"--benchmark_repetitions={args.repetitions}", "--benchmark_format=json",
           "--benchmark_report_aggregates_only=true",
           f"--benchmark_enable_random_interleaving={'true' if interleave else 'false'}"]
    if args.min_time is not None:
        cmd.append(f"--benchmark_min_time={args.min_time}")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    data = json.loads(out.stdout)
    # One repetition reports no aggregates, only the run itself.
    rows = {b["run_name"]: b for b in data["benchmarks"]
            if b.get("aggregate_name") == "median" or (args.repetitions == 1 and b.get("run_type") == "iteration")}
    return rows, data["context"]


def us(row):
    """The median CPU time of a row, in microseconds."""
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[row["time_unit"]]
    return row["cpu_time"] * scale


def fmt_time(t_us):
    if t_us is None:
        return "-"
    if t_us >= 1e6:
        return f"{t_us / 1e6:.2f} s"
    if t_us >= 1e3:
        return f"{t_us / 1e3:.2f} ms"
    return f"{t_us:.1f} us"


def fmt_ratio(a, b):
    return "-" if a is None or b is None else f"{a / b:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", help="the manifolds_bench binary (default: BUILD/benchmarks/manifolds_bench)")
    ap.add_argument("--build", default=str(ROOT / "build" / "bench"), help="the build folder holding the binary")
    ap.add_argument("--repetitions", type=int, default=9)
    ap.add_argument("--min-time", type=float, default=None, help="--benchmark_min_time per repetition, seconds")
    ap.add_argument("--dense-max-n", type=int, default=1024, help="largest N the dense route is timed at")
    ap.add_argument("--draws", type=int, default=20, help="random lifts per row of the accuracy table")
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a smoke run (see above)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    global SIZES
    if args.quick:
        SIZES = QUICK_SIZES
        args.repetitions, args.min_time, args.dense_max_n, args.draws = 1, 0.005, max(QUICK_SIZES), 1
        # The sizes of a quick run, and the N-independent core.
        args.filter = f"(N:({'|'.join(map(str, QUICK_SIZES))})|core/.*)$"

    exe = pathlib.Path(args.exe) if args.exe else pathlib.Path(args.build) / "benchmarks" / "manifolds_bench"
    if not exe.exists():
        sys.exit(f"run_manifolds.py: {exe} does not exist; build the manifolds_bench target first")

    rows, context = run_json(exe, args, ["--pinned_malloc", f"--dense_max_N={args.dense_max_n}"], True)

    def t(name):
        return us(rows[name]) if name in rows else None

    def retract(route, kind, n):
        return t(f"retract/{route}/{kind}/N:{n}")

    for kind in KINDS:
        for n in SIZES:
            for r in ("implicit", "transported") + (("dense", "dense_f") if n <= args.dense_max_n else ()):
                require(positive(retract(r, kind, n)), f"retract/{r}/{kind}/N:{n} missing")
    for name in [f"core/{k}" for k in KINDS] + [f"lift/{p}/N:{n}" for p in ("recomputed", "transported")
                                                  for n in SIZES]:
        require(positive(t(name)), f"{name} missing")

    print(f"manifolds_bench: St(N, 16), {args.repetitions} repetitions in random order, medians of CPU time per "
          f"call; malloc thresholds pinned; {context.get('num_cpus')} CPUs at {context.get('mhz_per_cpu')} MHz, "
          f"load average {', '.join(f'{x:.2f}' for x in context.get('load_avg', []))} at the start")
    if args.dense_max_n < max(SIZES):
        print(f"(the dense route is not timed past N = {args.dense_max_n})")
    print()

    for kind in KINDS:
        print(f"### Retraction::{kind}: time per call")
        table(["N", *ROUTES, "dense: forming Omega", "implicit speed-up over dense",
               "implicit speed-up over dense_f", "implicit over transported"],
              [[str(n), *(fmt_time(retract(r, kind, n)) for r in ROUTES), fmt_time(t(f"dense_omega/N:{n}")),
                fmt_ratio(retract("dense", kind, n), retract("implicit", kind, n)),
                fmt_ratio(retract("dense_f", kind, n), retract("implicit", kind, n)),
                fmt_ratio(retract("transported", kind, n), retract("implicit", kind, n))] for n in SIZES])
        print(f"### Retraction::{kind}: time ratio N -> 4N (linear 4, quadratic 16, cubic 64)")
        table(["N -> 4N", *ROUTES],
              [[f"{a} -> {b}", *(fmt_ratio(retract(r, kind, b), retract(r, kind, a)) for r in ROUTES)]
               for a, b in zip(SIZES, SIZES[1:])])

    defects = {}
    for name, row in rows.items():
        if name.startswith("retract/") and "defect" in row:
            route = name.split("/")[1]
            defects[route] = max(defects.get(route, 0.0), row["defect"])
    print("largest ||Y^T Y - I||_F at the end of a timed run (median row): " +
          ", ".join(f"{r} {defects[r]:.1e}" for r in ROUTES if r in defects))
    print()

    print("### The (2n) x (2n) core function alone (n = 16), and its share of the implicit route")
    table(["kind", "core", *(f"share at N = {n}" for n in SIZES)],
          [[kind, fmt_time(t(f"core/{kind}")),
            *(f"{100 * t(f'core/{kind}') / retract('implicit', kind, n):.0f} %" for n in SIZES)] for kind in KINDS])

    print("### lift(x, section, egrad): time per call")
    lift = {(p, n): t(f"lift/{p}/N:{n}") for p in ("recomputed", "transported") for n in SIZES}
    table(["N", "recomputed", "transported", "transported / recomputed", "ratio N/4 -> N, recomputed",
           "ratio N/4 -> N, transported"],
          [[str(n), fmt_time(lift["recomputed", n]), fmt_time(lift["transported", n]),
            fmt_ratio(lift["transported", n], lift["recomputed", n]),
            fmt_ratio(lift["recomputed", n], lift.get(("recomputed", n // 4))),
            fmt_ratio(lift["transported", n], lift.get(("transported", n // 4)))] for n in SIZES])

    require(defects and max(defects.values()) < 1e-6, f"a retraction left the manifold: {defects}")
    write_results(args.json, {
        "repetitions": args.repetitions,
        "retract_us": {f"{r}/{k}": {str(n): retract(r, k, n) for n in SIZES} for r in ROUTES for k in KINDS},
        "lift_us": {p: {str(n): lift[p, n] for n in SIZES} for p in ("recomputed", "transported")},
        "core_us": {k: t(f"core/{k}") for k in KINDS},
        "defect": defects,
    })

    default_filter = "retract/implicit/|lift/recomputed"
    if args.quick:
        args.filter = f"({default_filter}).*N:({'|'.join(map(str, QUICK_SIZES))})$"
        default_rows, _ = run_json(exe, args, [], False)
    else:
        default_rows, _ = run_json(exe, args, [f"--benchmark_filter={default_filter}"], False)

    def td(name):
        return us(default_rows[name]) if name in default_rows else None

    print("### glibc's default malloc thresholds, fresh process: implicit route and Householder lift")
    table(["N", *(f"implicit {k}" for k in KINDS), *(f"ratio to pinned, {k}" for k in KINDS), "lift recomputed",
           "ratio to pinned"],
          [[str(n), *(fmt_time(td(f"retract/implicit/{k}/N:{n}")) for k in KINDS),
            *(fmt_ratio(td(f"retract/implicit/{k}/N:{n}"), retract("implicit", k, n)) for k in KINDS),
            fmt_time(td(f"lift/recomputed/N:{n}")), fmt_ratio(td(f"lift/recomputed/N:{n}"), lift["recomputed", n])]
           for n in SIZES])

    if not args.skip_accuracy:
        print("### Accuracy: orthonormal W (the library) against the non-orthogonal U, V factors")
        print()
        out = subprocess.run([str(exe), "--accuracy", f"--draws={args.draws}"], check=True, capture_output=True,
                             text=True).stdout
        rows = [line for line in out.splitlines() if line.startswith("St(")]
        require(len(rows) == 16, f"accuracy: {len(rows)} rows instead of 16")
        for line in rows:
            require(all(float(x) < 1e-9 for x in line.split("|")[1].split()), f"accuracy: W route off: {line}")
        print("```\n" + out.rstrip() + "\n```")


if __name__ == "__main__":
    main()
