#!/usr/bin/env python3
"""Runs benchmarks/msign_bench (built beforehand; this script builds nothing) and prints one table per scalar type:
for each shape and method, the median CPU time per call, its ratio to Eigen's BDCSVD (thin U V^T) of the same
shape in the same run, and the accuracy of the result on a standard normal and on an ill-conditioned input
(singular values logarithmically spaced over [1e-4, 1]):

  max abs(s_i - 1)   the farthest singular value of the result from 1 (an exact polar factor has them all at 1)
  error              |Q - Q_exact|_F / sqrt(k), k = min(rows, cols): the distance to the exact polar factor of the
                     same input, relative to its norm sqrt(k)

The methods: newton_schulz (geomopt::msign_inplace with Muon's defaults, 5 quintic steps, preallocated
MsignWorkspace), ns_polish (the same and polish_steps = 5), polar_express (MsignMethod::polar_express, 5 steps of
its schedule), pe_8 (the same, 8 steps), gram (MsignMethod::gram), svd (MsignMethod::svd), bdcsvd (the reference:
Eigen::BDCSVD, thin U V^T), jacobi (Eigen::JacobiSVD, float at small shapes only). The repetitions of all rows run
interleaved in random order, so that a noisy stretch of the shared machine spreads over many rows instead of shifting
one.

Then a batch of 64x64 float matrices (64 of them; 4 with --quick) by Newton-Schulz and Polar Express: the median time
of msign_inplace on each in turn (one_by_one, the reference), of msign_batched on one thread (batched) and on two
(batched_2t), and the ratio one_by_one / mode (above 1: the batch is faster): by CPU time on one thread, by wall time
on two.

msign's exact methods (gram, svd) count singular values below sqrt(max(rows, cols)) eps(T) s_max as zero (gram also
those below sqrt(4 k eps(double)) s_max, what its Gram matrix resolves): where the input has such values, their
result drops as many directions ("(k cut)" beside max abs(s_i - 1), which is then 1), while Eigen's decompositions
keep them all.

Checks that fail the run (exit 1): a missing or non-positive time, a missing accuracy row, an exact method whose
result drops another number of directions than the rank rule says (none for Eigen's) or, dropping none, whose
singular values are off 1 by more than 1e-3 (float) or 1e-6 (double), and a Newton-Schulz or Polar Express result
whose singular values leave the band that geomopt::msign_band predicts for its input (by more than 1e-3).

usage: /usr/bin/python3 benchmarks/run_msign.py [--exe PATH | --build DIR] [--repetitions N] [--min-time S]
                                                [--skip-accuracy] [--quick] [--json FILE]
  --quick: the tiny shapes (float 64x64 and 128x32, double 64x64), 1 repetition of 5 ms per row
e.g.   cmake --build build/bench --target msign_bench
       /usr/bin/python3 benchmarks/run_msign.py --build build/bench --repetitions 7
"""
import argparse
import json
import pathlib
import subprocess
import sys

from bench_markdown import ROOT, positive, require, table, write_results

METHODS = ("newton_schulz", "ns_polish", "polar_express", "pe_8", "gram", "svd", "bdcsvd", "jacobi")
LABELS = {"newton_schulz": "Newton-Schulz, Muon's 5 steps", "ns_polish": "Newton-Schulz + 5 polish steps",
          "polar_express": "Polar Express, 5 steps", "pe_8": "Polar Express, 8 steps",
          "gram": "msign gram (eigh of the Gram matrix, double)", "svd": "msign svd (BDCSVD, rank cut)",
          "bdcsvd": "Eigen BDCSVD (reference)", "jacobi": "Eigen JacobiSVD"}
INPUTS = ("gaussian", "ill_conditioned")
RANK_CUT = ("gram", "svd")  # msign's exact methods: singular values below max(rows, cols) eps s_max count as zero
EXACT = RANK_CUT + ("bdcsvd", "jacobi")


def shape_key(shape):
    rows, cols = (int(x) for x in shape.split("x"))
    return (rows != cols, cols, rows)  # the square family by n, then the tall one


def run_timings(exe, args):
    cmd = [str(exe), f"--benchmark_repetitions={args.repetitions}", "--benchmark_format=json",
           "--benchmark_report_aggregates_only=true", "--benchmark_enable_random_interleaving=true",
           f"--benchmark_min_time={args.min_time}"]
    if args.quick:
        cmd.append("--quick")
    data = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    times = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") == "median" or (args.repetitions == 1 and b.get("run_type") == "iteration"):
            require("error_message" not in b, f"{b['run_name']}: {b.get('error_message')}")
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
            times[b["run_name"].removeprefix("msign/")] = b["cpu_time"] * scale
            if b["run_name"].startswith("batch/"):  # two threads: the wall time, not the calling thread's CPU time
                times["wall/" + b["run_name"]] = b["real_time"] * scale
    return times, data["context"]


def run_accuracy(exe, args):
    cmd = [str(exe), "--accuracy"] + (["--quick"] if args.quick else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    acc = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 14 and f[0] == "accuracy":
            t, shape, inp, method = f[1:5]
            dev, err, s_lo, s_hi, band_lo, band_hi, s_rel = (float(x) for x in f[5:12])
            acc[f"{t}/{shape}/{method}/{inp}"] = {"dev": dev, "err": err, "s_lo": s_lo, "s_hi": s_hi,
                                                 "band": [band_lo, band_hi], "s_min_rel": s_rel,
                                                 "dropped": int(f[12]), "below_rule": int(f[13])}
    return acc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", help="the msign_bench binary (default: BUILD/benchmarks/msign_bench)")
    ap.add_argument("--build", default=str(ROOT / "build" / "bench"), help="the build folder holding the binary")
    ap.add_argument("--repetitions", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.1, help="--benchmark_min_time per repetition, seconds")
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a smoke run (see above)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.quick:
        args.repetitions, args.min_time = 1, 0.005

    exe = pathlib.Path(args.exe) if args.exe else pathlib.Path(args.build) / "benchmarks" / "msign_bench"
    if not exe.exists():
        sys.exit(f"run_msign.py: {exe} does not exist; build the msign_bench target first")

    times, context = run_timings(exe, args)
    batch_times = {k: v for k, v in times.items() if k.startswith("batch/")}
    batch_wall = {k.removeprefix("wall/"): v for k, v in times.items() if k.startswith("wall/")}
    times = {k: v for k, v in times.items() if not k.startswith(("batch/", "wall/"))}
    acc = {} if args.skip_accuracy else run_accuracy(exe, args)
    cases = {}  # type -> shape -> [methods]
    for name in times:
        t, shape, method = name.split("/")
        require(method in METHODS, f"unknown method in {name}")
        cases.setdefault(t, {}).setdefault(shape, []).append(method)
    require("float" in cases, "no float rows")

    print(f"msign_bench: {args.repetitions} repetitions in random order, medians of CPU time per call (1 thread); "
          f"{context.get('num_cpus')} CPUs at {context.get('mhz_per_cpu')} MHz, load average "
          f"{', '.join(f'{x:.2f}' for x in context.get('load_avg', []))} at the start")
    print()
    ratios = {}
    for t in ("float", "double"):
        if t not in cases:
            continue
        print(f"### {t}: time per call, ratio to BDCSVD, accuracy")
        ref = "BDCSVD in double" if t == "float" else "JacobiSVD in double"
        print(f"(error: against the exact polar factor of the same {t} input, computed by {ref})")
        print()
        rows = []
        for shape in sorted(cases[t], key=shape_key):
            ref_ms = times.get(f"{t}/{shape}/bdcsvd")
            require(positive(ref_ms), f"{t}/{shape}/bdcsvd: no time")
            for method in METHODS:
                if method not in cases[t][shape]:
                    continue
                ms = times[f"{t}/{shape}/{method}"]
                require(positive(ms), f"{t}/{shape}/{method}: time {ms}")
                ratios[f"{t}/{shape}/{method}"] = ms / ref_ms
                row = [shape, LABELS[method], f"{ms:.3g}", f"{ms / ref_ms:.3g}"]
                for inp in INPUTS:
                    a = acc.get(f"{t}/{shape}/{method}/{inp}")
                    if not args.skip_accuracy:
                        require(a is not None, f"{t}/{shape}/{method}/{inp}: no accuracy line")
                    cut = f" ({a['dropped']} cut)" if a and a["dropped"] and method in EXACT else ""
                    row += [f"{a['dev']:.1e}{cut}", f"{a['err']:.1e}"] if a else ["-", "-"]
                rows.append(row)
        table(["shape", "method", "time (ms)", "time / BDCSVD", "Gaussian: max abs(s_i - 1)", "Gaussian: error",
               "ill-conditioned: max abs(s_i - 1)", "ill-conditioned: error"], rows)

    if acc:
        # The band Newton-Schulz maps each input into, and where the result's singular values fell.
        print("### Newton-Schulz: the result's singular values against msign_band's prediction")
        band_rows = []
        def order(key):
            t, shape, method, inp = key.split("/")
            return (t != "float", shape_key(shape), INPUTS.index(inp), METHODS.index(method))
        for key in sorted(acc, key=order):
            a = acc[key]
            t, shape, method, inp = key.split("/")
            if method in EXACT:
                # msign's exact methods drop what the rank rule calls zero and map the rest to 1; Eigen's keep all.
                cut = a["below_rule"] if method in RANK_CUT else 0
                require(a["dropped"] == cut, f"{key}: {a['dropped']} directions dropped, the rank rule says {cut}")
                if not cut:
                    require(a["dev"] < (1e-3 if t == "float" else 1e-6), f"{key}: exact method off by {a['dev']}")
                continue
            lo, hi = a["band"]
            require(a["s_lo"] >= lo - 1e-3 and a["s_hi"] <= hi + 1e-3,
                    f"{key}: singular values [{a['s_lo']}, {a['s_hi']}] outside msign_band's [{lo}, {hi}]")
            band_rows.append([t, shape, inp, method, f"{a['s_min_rel']:.2e}", f"[{lo:.3g}, {hi:.3g}]",
                              f"[{a['s_lo']:.3g}, {a['s_hi']:.3g}]"])
        table(["type", "shape", "input", "method", "s_min(M) / abs(M)_F", "msign_band", "singular values of Q"],
              band_rows)

    # The batch: every mode against one_by_one, the same matrices by msign_inplace in turn. On one thread by CPU
    # time (what the shared machine's other load leaves out), on two by wall time (the CPU time of the calling thread
    # would count half the work), each against one_by_one's of the same kind.
    batch_ratio = {}
    batch_rows = []
    for key in sorted(k for k in batch_times if k.endswith("/one_by_one")):
        base = key.removesuffix("/one_by_one")
        _, t, shape, method = base.split("/")
        for mode in ("one_by_one", "batched", "batched_2t"):
            cpu, wall = batch_times.get(f"{base}/{mode}"), batch_wall.get(f"{base}/{mode}")
            require(positive(cpu) and positive(wall), f"{base}/{mode}: times {cpu}, {wall}")
            by = batch_wall if mode == "batched_2t" else batch_times
            ratio = by[key] / by[f"{base}/{mode}"]
            batch_ratio[f"{t}/{shape}/{method}/{mode}"] = ratio
            batch_rows.append([t, shape, LABELS[method], mode, f"{cpu:.3g}", f"{wall:.3g}",
                               f"{ratio:.2f} ({'wall' if mode == 'batched_2t' else 'CPU'})"])
    require(batch_rows, "no batch rows")
    print("### A batch of float matrices: msign_batched against msign_inplace on each in turn")
    print("(shape: batch x rows x cols; times of the whole batch, the batch copied in first in every mode; CPU time is "
          "the calling thread's)")
    print()
    table(["type", "shape", "method", "mode", "CPU time (ms)", "wall time (ms)", "one_by_one / mode"], batch_rows)

    write_results(args.json, {"repetitions": args.repetitions, "time_ms": times, "ratio": ratios,
                              "accuracy": acc, "batch_time_ms": batch_times, "batch_wall_ms": batch_wall,
                              "batch_ratio": batch_ratio})


if __name__ == "__main__":
    main()
