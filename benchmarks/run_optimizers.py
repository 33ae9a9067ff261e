#!/usr/bin/env python3
"""Runs benchmarks/optimizers_bench (built beforehand, one binary per --build; this script builds nothing) and
benchmarks/torch_optimizers.py in ONE run, interleaved in rounds, and prints markdown tables of medians and ratios.

One round: for each build, the binary's tree cases (streaming roof and geomopt steps, --inner repetitions each,
interleaved inside the process); for each malloc configuration, the PyTorch script (its four configurations
interleaved inside the process); then, for each build, the binary's manifold cases. Every figure is the median over
all repetitions of all rounds; every ratio is between medians of the same run, and beside it the range of the same
ratio taken round by round (the medians of one round), which shows how far the machine's drift moved it.

The tree is the one the build was configured with (GEOMOPT_TREE369_SHAPES: the shared 369-leaf tree of 20,153,696
floats, or benchmarks/tree_small.shapes where that is missing); the PyTorch side reads the same shapes file.

Figures (times per step, and ratios of times, first named over second: above 1 means the second is faster):
  roof / Adam              the streaming roof (4 arrays read, 3 written, as many floats as the tree) over the geomopt
                           Adam step on the tree, same thread count (goal >= 0.9)
  Adam 1 thread / 2        geomopt's speed-up from 2 threads (goal >= 1.7); the roof's own speed-up beside it
  torch 1t best / geomopt  torch's best single-thread configuration (foreach, malloc) over geomopt's 1 thread
                           (goal >= 1.7)
  torch best / geomopt best  each side at its best thread count (goal >= 3)
  --diagnose               roof over diagnostic kernels with Adam's traffic and part of its arithmetic removed
                           (no square root; neither square root nor division), and over Adam fused in one pass
  manifold                 a Stiefel<float> St(N, 16) leaf stepped by Adam, SectionPolicy::recomputed and
                           ::transported (Cayley), against the Euclidean Adam step of an N x 16 MatrixXf

usage: benchmarks/run_optimizers.py --build DIR [--build DIR2 ...] [--repetitions N] [--inner K]
                                    [--torch-python /usr/bin/python3] [--malloc NAME=ENV ...]
                                    [--cxx-env NAME=ENV ...] [--diagnose] [--skip-torch] [--skip-manifold]
                                    [--quick] [--json FILE]
  --quick: 1 round of 1 repetition, steps of at least 2 ms, St(N, 16) at N = 64 and 128 only, PyTorch under glibc's
  defaults alone (skipped, with a message, when --torch-python cannot import torch); every figure still checked.
  --malloc / --cxx-env NAME=VAR=VALUE [VAR=VALUE ...]: an environment the PyTorch script / the C++ binary runs
  under (glibc reads its malloc tunables at start-up; geomopt reads GEOMOPT_KERNEL_PATH=portable|avx2); each is
  one more column of the run. The C++ binary runs under the caller's environment unless told otherwise.
e.g.   /usr/bin/python3 benchmarks/run_optimizers.py --build build/bench --build build/bench-native --repetitions 7 \
           --cxx-env avx2=GEOMOPT_KERNEL_PATH=avx2 --cxx-env portable=GEOMOPT_KERNEL_PATH=portable --diagnose
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

from bench_markdown import build_shapes, describe_tree, positive, require, table, write_results

ROOT = pathlib.Path(__file__).resolve().parent.parent
TREE_CASES = ["roof_1t", "adam_1t", "roof_2t", "adam_2t", "roof32_1t", "sgd_1t", "adamw_1t", "roof_l2", "adam_l2"]
DIAG_CASES = ["adam_nosqrt_1t", "adam_nosqrtdiv_1t", "adam_fused_1t"]
SIZES = (64, 128, 256, 512, 1024, 2048, 4096)
QUICK_SIZES = (64, 128)

# The malloc configurations the PyTorch side is run under (glibc reads them at start-up). "pinned": no block below
# 32 MiB is mmapped and the heap is never trimmed, so the temporaries of a step reuse pages already mapped.
DEFAULT_MALLOC = [
    "default=",
    "pinned=GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296",
    "pinned_thp=GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296:"
    "glibc.malloc.hugetlb=1",
]


def parse_env(spec):
    name, _, rest = spec.partition("=")
    env = {}
    for item in rest.split() if rest else []:
        k, _, v = item.partition("=")
        env[k] = v
    return name, env


def run_json(cmd, env=None):
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=full_env)
    return json.loads(out.stdout)


def median(xs):
    return statistics.median(xs) if xs else None


def fmt_time(s):
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def load_avg():
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", action="append", help="a build folder holding benchmarks/optimizers_bench "
                    "(repeat for several; default build/bench)")
    ap.add_argument("--repetitions", type=int, default=7, help="rounds")
    ap.add_argument("--inner", type=int, default=3, help="interleaved repetitions per process and round")
    ap.add_argument("--torch-python", default="/usr/bin/python3")
    ap.add_argument("--malloc", action="append",
                    help="NAME=VAR=VALUE [VAR=VALUE...]: an environment the PyTorch script runs under (repeatable; "
                         "default: glibc's defaults, pinned thresholds, pinned thresholds + THP)")
    ap.add_argument("--cxx-env", "--cxx-malloc", dest="cxx_env", action="append",
                    help="NAME=VAR=VALUE [VAR=VALUE...]: an environment the C++ binary runs under (repeatable; "
                         "default: the caller's)")
    ap.add_argument("--diagnose", action="store_true",
                    help="also time the diagnostic kernels (optimizers_bench's diag group) with the tree cases")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-manifold", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a smoke run (see above)")
    ap.add_argument("--json", help="also write the medians and ratios to this file")
    args = ap.parse_args()
    sizes = QUICK_SIZES if args.quick else SIZES
    min_ms = ["--min-ms=2", "--warmup=1"] if args.quick else []
    torch_args = ["--reps=1", "--warmup=1"] if args.quick else []
    if args.quick:
        args.repetitions, args.inner = 1, 1
        args.malloc = args.malloc or [DEFAULT_MALLOC[0]]
    if not args.skip_torch and subprocess.run([args.torch_python, "-c", "import torch"],
                                              capture_output=True).returncode != 0:
        print(f"run_optimizers.py: {args.torch_python} cannot import torch (Debian: python3-torch, "
              "scripts/install_deps.sh); the PyTorch side is skipped", file=sys.stderr)
        args.skip_torch = True

    builds = [pathlib.Path(b) for b in (args.build or [str(ROOT / "build" / "bench")])]
    for b in builds:
        if not (b / "benchmarks" / "optimizers_bench").exists():
            sys.exit(f"run_optimizers.py: {b}/benchmarks/optimizers_bench does not exist; build the target first")
    mallocs = [parse_env(s) for s in (args.malloc or DEFAULT_MALLOC)]
    cxx_mallocs = [parse_env(s) for s in (args.cxx_env or ["default="])]
    # The C++ sources: one per build and environment, labelled by the build alone when there is one environment.
    sources = [(b, name, env, str(b) if len(cxx_mallocs) == 1 else f"{b} [{name}]")
               for b in builds for name, env in cxx_mallocs]
    torch_script = ROOT / "benchmarks" / "torch_optimizers.py"
    shapes = build_shapes(builds[0])
    tree = describe_tree(shapes)
    manifold_cases = ",".join(f"{k}/{n}" for k in ("eu", "rec", "tra") for n in sizes)

    # samples[(source, case)] = list of seconds; per_round[(source, case)] = list of per-round medians
    samples, per_round, defects, entries = {}, {}, {}, {}

    def record(source, data):
        for case, v in data["cases"].items():
            require(v["seconds"] and all(positive(x) for x in v["seconds"]), f"{source} {case}: no positive time")
            entries[case] = v["entries"]
            samples.setdefault((source, case), []).extend(v["seconds"])
            per_round.setdefault((source, case), []).append(median(v["seconds"]))
            if "defect" in v:
                key = (source, case.split("/")[0])
                defects[key] = max(defects.get(key, 0.0), v["defect"])

    loads = [load_avg()]
    torch_version = None
    t_start = time.time()
    for r in range(args.repetitions):
        for b, _, env, label in sources:
            record(label, run_json([str(b / "benchmarks" / "optimizers_bench"),
                                    "--cases=tree,diag" if args.diagnose else "--cases=tree",
                                    f"--reps={args.inner}", *min_ms], env))
        if not args.skip_torch:
            for name, env in mallocs:
                d = run_json([args.torch_python, str(torch_script), f"--shapes={shapes}",
                              f"--reps={max(1, args.inner - 1)}", *torch_args], env)
                torch_version = d["torch"]
                record(f"torch:{name}", d)
        if not args.skip_manifold:
            for b in builds:
                record(f"{b} manifold", run_json([str(b / "benchmarks" / "optimizers_bench"),
                                                  f"--cases={manifold_cases}", f"--reps={args.inner}",
                                                  "--min-ms=2" if args.quick else "--min-ms=20"]))
        loads.append(load_avg())
        print(f"round {r + 1}/{args.repetitions} done, load average {loads[-1]}", file=sys.stderr)

    def t(source, case):
        return median(samples.get((source, case), []))

    def ratio_value(num, den):
        """The ratio of medians num / den (each a (source, case) or a list of them, the best taken), and its range
        over the rounds: (ratio, lowest, highest), or None."""
        def best(keys, agg):
            vals = [agg(k) for k in keys if k in samples]
            return min(vals) if vals else None
        nk = num if isinstance(num, list) else [num]
        dk = den if isinstance(den, list) else [den]
        a = best(nk, lambda k: median(samples[k]))
        b = best(dk, lambda k: median(samples[k]))
        if a is None or b is None:
            return None
        rounds = []
        for i in range(args.repetitions):
            ra = best(nk, lambda k: per_round[k][i] if i < len(per_round[k]) else float("inf"))
            rb = best(dk, lambda k: per_round[k][i] if i < len(per_round[k]) else float("inf"))
            rounds.append(ra / rb)
        return a / b, min(rounds), max(rounds)

    def ratio(num, den):
        r = ratio_value(num, den)
        return "-" if r is None else f"**{r[0]:.2f}** ({r[1]:.2f}-{r[2]:.2f})"

    print(f"run_optimizers.py: {args.repetitions} rounds x {args.inner} interleaved repetitions, medians of wall "
          f"time per step; load average (1, 5, 15 min) at the start {loads[0]}, at the end {loads[-1]}; "
          f"{time.time() - t_start:.0f} s; torch {torch_version or 'not run'}")
    print()

    torch_sources = [f"torch:{name}" for name, _ in mallocs] if not args.skip_torch else []
    torch_cases = [f"torch_foreach{f}_{th}t" for th in (1, 2) for f in (0, 1)]
    if torch_sources:
        print(f"### PyTorch: torch.optim.Adam(lr=1e-3).step() on {tree}, time per step")
        table(["malloc", *(c.replace("torch_", "") for c in torch_cases)],
              [[src.split(":", 1)[1], *(fmt_time(t(src, c)) for c in torch_cases)] for src in torch_sources])
        for name, env in mallocs:
            if env:
                print(f"- {name}: " + " ".join(f"`{k}={v}`" for k, v in env.items()))
        print()
    t1_keys = [(s, c) for s in torch_sources for c in torch_cases if c.endswith("_1t")]
    all_keys = [(s, c) for s in torch_sources for c in torch_cases]

    def best_key(keys):
        keys = [k for k in keys if k in samples]
        return min(keys, key=lambda k: median(samples[k])) if keys else None

    for name, env in cxx_mallocs:
        if env:
            print(f"- C++ under {name}: " + " ".join(f"`{k}={v}`" for k, v in env.items()))
    print()
    for b, _, _, label in sources:
        src = label
        print(f"### geomopt, {label}: {tree}, time per step")
        gb = entries["adam_1t"] * 28 / 1e9  # Adam's traffic: 4 arrays read, 3 written, 4 bytes each
        table(["case", "median", "GB/s at 28 B/entry (Adam, roof)"],
              [[c, fmt_time(t(src, c)),
                f"{gb / t(src, c):.1f}" if c in ("roof_1t", "roof_2t", "adamw_1t") or c.startswith("adam_") and
                not c.endswith("l2") else ""] for c in TREE_CASES + DIAG_CASES if t(src, c) is not None])
        rows = [
            ["roof / Adam, 1 thread (goal >= 0.9)", ratio((src, "roof_1t"), (src, "adam_1t"))],
            ["roof / Adam, 2 threads (goal >= 0.9)", ratio((src, "roof_2t"), (src, "adam_2t"))],
            ["Adam 1 thread / 2 threads (goal >= 1.7)", ratio((src, "adam_1t"), (src, "adam_2t"))],
            ["roof 1 thread / 2 threads (the memory's own speed-up)", ratio((src, "roof_1t"), (src, "roof_2t"))],
            ["roof(3 read, 2 written) / SGD momentum, 1 thread", ratio((src, "roof32_1t"), (src, "sgd_1t"))],
            ["roof / AdamW, 1 thread", ratio((src, "roof_1t"), (src, "adamw_1t"))],
            ["in cache (16,384 entries): roof / Adam", ratio((src, "roof_l2"), (src, "adam_l2"))],
            [f"Adam's arithmetic alone (in-cache time per entry x {entries['adam_1t']:,.0f}) / roof, 1 thread",
             "**%.2f**" % ((t(src, "adam_l2") / entries["adam_l2"] * entries["adam_1t"]) / t(src, "roof_1t"))
             if t(src, "adam_l2") else "-"],
        ]
        if args.diagnose:
            rows += [[f"roof / {c}, 1 thread", ratio((src, "roof_1t"), (src, c))]
                     for c in ("adam_nosqrt_1t", "adam_nosqrtdiv_1t", "adam_fused_1t")]
        if torch_sources:
            b1 = best_key(t1_keys)
            ba = best_key(all_keys)
            rows += [
                [f"torch best 1 thread ({b1[0][6:]}, {b1[1][6:]}) / geomopt Adam 1 thread (goal >= 1.7)",
                 ratio(t1_keys, (src, "adam_1t"))],
                [f"torch best ({ba[0][6:]}, {ba[1][6:]}) / geomopt Adam best of 1, 2 threads (goal >= 3)",
                 ratio(all_keys, [(src, "adam_1t"), (src, "adam_2t")])],
                ["torch best 1 thread / the roof, 1 thread", ratio(t1_keys, (src, "roof_1t"))],
            ]
        table(["ratio of medians (range over rounds)", "value"], rows)

    if not args.skip_manifold:
        for b in builds:
            src = f"{b} manifold"
            print(f"### geomopt, {b}: Adam on one St(N, 16) leaf (float, Cayley), time per step")
            print(f"(largest ||Y^T Y - I||_F after a timed run: recomputed "
                  f"{defects.get((src, 'rec'), float('nan')):.1e}, transported "
                  f"{defects.get((src, 'tra'), float('nan')):.1e})")
            print()
            table(["N", "Euclidean N x 16", "recomputed", "transported", "recomputed / Euclidean",
                   "transported / Euclidean", "transported / recomputed", "recomputed N/2 -> N",
                   "transported N/2 -> N"],
                  [[str(n), fmt_time(t(src, f"eu/{n}")), fmt_time(t(src, f"rec/{n}")), fmt_time(t(src, f"tra/{n}")),
                    ratio((src, f"rec/{n}"), (src, f"eu/{n}")), ratio((src, f"tra/{n}"), (src, f"eu/{n}")),
                    ratio((src, f"tra/{n}"), (src, f"rec/{n}")),
                    ratio((src, f"rec/{n}"), (src, f"rec/{n // 2}")) if n > sizes[0] else "-",
                    ratio((src, f"tra/{n}"), (src, f"tra/{n // 2}")) if n > sizes[0] else "-"]
                   for n in sizes])

    print("raw medians (seconds): " + json.dumps({f"{s}|{c}": median(v) for (s, c), v in sorted(samples.items())}))

    # The figures run_all charts and summarises: the first source's, each a median of the run.
    src = sources[0][3]
    for c in ("roof_1t", "adam_1t", "roof_2t", "adam_2t"):
        require(t(src, c) is not None, f"case {c} missing")
    results = {
        "tree": tree, "rounds": args.repetitions, "inner": args.inner, "torch": torch_version,
        "gbps": {c: entries[c] * 28 / 1e9 / t(src, c) for c in ("roof_1t", "adam_1t", "roof_2t", "adam_2t")},
        "ratios": {"roof / Adam, 1 thread": ratio_value((src, "roof_1t"), (src, "adam_1t"))[0],
                   "roof / Adam, 2 threads": ratio_value((src, "roof_2t"), (src, "adam_2t"))[0],
                   "Adam 1 thread / 2 threads": ratio_value((src, "adam_1t"), (src, "adam_2t"))[0]},
    }
    if torch_sources:
        b1, ba = best_key(t1_keys), best_key(all_keys)
        results["gbps"]["torch_best_1t"] = entries["adam_1t"] * 28 / 1e9 / median(samples[b1])
        results["gbps"]["torch_best"] = entries["adam_1t"] * 28 / 1e9 / median(samples[ba])
        results["torch_best"] = {"1t": f"{b1[0][6:]}, {b1[1][6:]}", "any": f"{ba[0][6:]}, {ba[1][6:]}"}
        results["ratios"]["torch best 1 thread / Adam 1 thread"] = ratio_value(t1_keys, (src, "adam_1t"))[0]
        results["ratios"]["torch best / Adam best"] = ratio_value(all_keys, [(src, "adam_1t"), (src, "adam_2t")])[0]
    if not args.skip_manifold:
        msrc = f"{builds[0]} manifold"
        results["manifold"] = {str(n): {k: t(msrc, f"{k}/{n}") for k in ("eu", "rec", "tra")} for n in sizes}
        results["defect"] = {k: defects.get((msrc, k)) for k in ("rec", "tra")}
        for n in sizes:
            require(all(positive(v) for v in results["manifold"][str(n)].values()), f"St({n}, 16): missing time")
        require(all(d is not None and d < 1e-2 for d in results["defect"].values()),
                f"Stiefel leaf left the manifold: {results['defect']}")
    write_results(args.json, results)


if __name__ == "__main__":
    main()
