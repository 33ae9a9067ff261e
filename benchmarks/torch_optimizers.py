#!/usr/bin/python3
"""The PyTorch side of benchmarks/run_optimizers.py: torch.optim.Adam(params, lr=1e-3).step() on the leaves of the
shapes file (float32; 20,153,696 numbers for the 369-leaf tree), with foreach=False and foreach=True, under
torch.set_num_threads(1) and (2).

Every configuration has its own optimizer (its own exp_avg, exp_avg_sq) over the same parameters and gradients
(uniform in [-1, 1], set once; the step is what is timed, not the backward pass). After --warmup steps of each, the
configurations are timed in turn, --reps times (1 thread: foreach False, True; 2 threads: False, True; again ...),
so a drift of the shared machine hits all alike; after each change of the thread count one untimed step runs first.
Each sample is the wall time of --inner steps, divided.

The malloc configuration is the environment's: run_optimizers.py starts this script once per configuration
(glibc's defaults, or GLIBC_TUNABLES / MALLOC_ARENA_MAX), since glibc reads them at start-up.

Prints one JSON object: {"torch": version, "cases": {"torch_foreach0_1t": {"seconds": [...]}, ...}}.

usage: /usr/bin/python3 benchmarks/torch_optimizers.py [--shapes FILE] [--reps R] [--warmup W] [--inner K]
                                                       [--threads 1,2] [--foreach 0,1]
  --shapes defaults to ../shared/bench/transformer369_d256.shapes, or benchmarks/tree_small.shapes without it;
  run_optimizers.py passes the file its C++ build was configured with.
"""
import argparse
import json
import os
import sys
import time

import torch

from bench_markdown import default_shapes, read_shapes, torch_tree


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=str(default_shapes()))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--inner", type=int, default=1)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--foreach", default="0,1")
    args = ap.parse_args()

    params = torch_tree(read_shapes(args.shapes))
    numel = sum(p.numel() for p in params)

    threads = [int(x) for x in args.threads.split(",")]
    foreach = [bool(int(x)) for x in args.foreach.split(",")]
    opts = {(t, f): torch.optim.Adam(params, lr=1e-3, foreach=f) for t in threads for f in foreach}
    name = {(t, f): f"torch_foreach{int(f)}_{t}t" for (t, f) in opts}
    seconds = {k: [] for k in opts}

    for t in threads:
        torch.set_num_threads(t)
        for f in foreach:
            for _ in range(args.warmup):
                opts[t, f].step()
    for _ in range(args.reps):
        for t in threads:
            torch.set_num_threads(t)
            opts[t, foreach[0]].step()  # untimed: the thread team is resized by the first parallel region
            for f in foreach:
                t0 = time.perf_counter()
                for _ in range(args.inner):
                    opts[t, f].step()
                seconds[t, f].append((time.perf_counter() - t0) / args.inner)

    json.dump({"torch": torch.__version__, "numel": numel, "leaves": len(params),
               "env": {k: os.environ[k] for k in ("GLIBC_TUNABLES", "MALLOC_ARENA_MAX") if k in os.environ},
               "cases": {name[k]: {"entries": numel, "seconds": v} for k, v in seconds.items()}}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
