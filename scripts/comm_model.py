#!/usr/bin/env python3
"""The bytes and messages each rank sends per optimizer step, and the step's communication time, under geomopt's
distributed engines, for a tree of matrices at any rank count.

Modes (each as the C++ code does it, re-implemented here from distributed/src and distributed/include, never called):
  ddp         GradientAverager::average then a local step (averaging_engine.cpp): the flat tree cut into buckets of
              bucket_bytes; per bucket a reduce-scatter and an all-gather of chunks [c n / P, (c + 1) n / P) as
              direct messages to every other rank; plus one 32-byte status message to each other rank per call.
  zero1       ZeroRedundancyOptimizer with an entry-wise optimizer (Adam): every leaf a unit, leaves of more than
              max_piece_entries cut into pieces of equal size rounded up to 64 entries, units placed by longest
              processing time first (ownership.hpp); one message per other rank and phase carries a rank's whole
              region (shard_exchange.cpp); plus the status messages and the step's decisions (one message of 8
              bytes to every other rank per decision).
  owner-muon  ZeroRedundancyOptimizer<Muon>: matrices (rows, cols >= 2) stay whole, cost msign_flops(rows, cols) (five
              Newton-Schulz steps); vectors are entry-wise units as under zero1.
References (textbook, not geomopt's): ring all-reduce, 2 (P - 1) / P of each bucket in 2 (P - 1) messages of a P-th
of it, one after another; Rabenseifner's all-reduce (recursive halving, then doubling), the same bytes in 2 log2 P
messages. Both are given the same buckets as ddp.

Time, the alpha-beta model: a rank's time is messages * alpha + bytes / beta, the step's is the maximum over ranks;
a collective call (none in a step; kept for the counter's other calls) counts ceil(log2 P) messages and (P - 1) b
bytes for b bytes per rank (recursive doubling). It ignores contention (links and switches shared by ranks, the bisection bandwidth that a direct
all-to-all exchange needs and a ring does not), overlap with compute and between buckets, the receive side, and the
dependence of a ring's steps (its 2 (P - 1) latencies are on the critical path; the direct exchange posts its P - 1
messages at once, so charging alpha to each of them is an upper bound for it).

Input: a shapes file, one leaf per line "rows [cols]" (cols 1 when absent), '#' starting a comment line.
  scripts/comm_model.py ../shared/bench/transformer369_d256.shapes --ranks 8 64 1024 --gbps 10 100 --latency-us 2
  scripts/comm_model.py SHAPES --json ...         the same figures, with every rank's, as JSON
  scripts/comm_model.py --check MEASURED.json     compare bytes measured by tests/distributed/traffic_test.cpp
"""

import argparse
import heapq
import json
import math
import sys

STATUS_BYTES = 32  # kStatusWords = 4 int64 per status message (tree_signature.hpp)
SIZE_T_BYTES = 8  # a leaf index among the decisions (std::size_t)
MODES = ("ddp", "zero1", "owner-muon")
REFERENCES = ("ring", "rabenseifner")


def read_shapes(path):
    """The leaves of a shapes file, as (rows, cols)."""
    leaves = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            words = line.split()
            leaves.append((int(words[0]), int(words[1]) if len(words) > 1 else 1))
    return leaves


def msign_flops(rows, cols, steps=5):
    """optimizers/include/geomopt/optimizers/msign.hpp, default MsignOptions (Newton-Schulz, 5 steps, no polish)."""
    n, k = float(max(rows, cols)), float(min(rows, cols))
    return float(steps) * (3 * n * k * k + k * k * k)


def leaf_costs(leaves, mode):
    """detail::leaf_cost of zero_redundancy_optimizer.hpp for one-block float leaves: (entries, cost, splittable)."""
    out = []
    for rows, cols in leaves:
        entries = rows * cols
        if mode == "owner-muon" and rows >= 2 and cols >= 2:
            out.append((entries, 1.0 * msign_flops(rows, cols), False))
        else:
            out.append((entries, 1.0 * float(entries), True))
    return out


def ownership_plan(costs, ranks, max_piece_entries):
    """OwnershipPlan (ownership.hpp): units (leaf, begin, end, cost, owner) in walk order."""
    units = []
    for leaf, (n, cost, splittable) in enumerate(costs):
        if not splittable or n <= max_piece_entries:
            units.append([leaf, 0, n, cost, 0])
            continue
        k = (n + max_piece_entries - 1) // max_piece_entries
        piece = ((n + k - 1) // k + 63) // 64 * 64
        for b in range(0, n, piece):
            e = min(n, b + piece)
            units.append([leaf, b, e, cost * float(e - b) / float(n), 0])
    # Longest processing time first: decreasing cost, equal costs in walk order (a stable sort); each unit to the least
    # loaded rank, equal loads to the lowest rank (std::min_element), which a heap of (load, rank) pops first.
    order = sorted(range(len(units)), key=lambda u: -units[u][3])
    heap = [(0.0, r) for r in range(ranks)]
    for u in order:
        load, r = heapq.heappop(heap)
        units[u][4] = r
        heapq.heappush(heap, (load + units[u][3], r))
    return units


class Traffic:
    """Per rank: point-to-point bytes and messages sent; the collective calls (all-gathers) and their bytes per rank."""

    def __init__(self, ranks):
        self.P = ranks
        self.bytes = [0] * ranks
        self.messages = [0] * ranks
        self.collective_calls = 0
        self.collective_bytes = 0  # each rank's contribution to each all-gather, summed over the calls
        self.extra = {}

    def seconds(self, gbps, latency_s):
        """The alpha-beta time: max over ranks of messages * alpha + bytes / beta, the all-gathers included."""
        beta = gbps * 1e9 / 8
        rounds = math.ceil(math.log2(self.P)) if self.P > 1 else 0
        gather = self.collective_calls * rounds * latency_s + (self.P - 1) * self.collective_bytes / beta
        return max(m * latency_s + b / beta for m, b in zip(self.messages, self.bytes)) + gather


def ddp_traffic(leaves, ranks, scalar_bytes, bucket_bytes):
    """AveragingEngine (averaging_engine.cpp): one call of GradientAverager::average."""
    P, t = ranks, Traffic(ranks)
    entries = sum(r * c for r, c in leaves)
    bucket_entries = max(1, bucket_bytes // scalar_bytes)
    buckets = (entries + bucket_entries - 1) // bucket_entries
    t.extra["buckets"] = buckets
    if P == 1:
        return t  # the mean of one tree is the tree: no message
    for k in range(buckets):
        n = min(entries, (k + 1) * bucket_entries) - k * bucket_entries
        chunk = [n * (c + 1) // P - n * c // P for c in range(P)]
        nonzero = sum(1 for c in chunk if c > 0)
        for r in range(P):
            own = chunk[r]
            # Phase 1: chunk q to each other rank q with a non-empty chunk; phase 2: my chunk, if any, to every other.
            t.messages[r] += nonzero - (1 if own > 0 else 0) + (P - 1 if own > 0 else 0)
            t.bytes[r] += (n - own + (P - 1) * own) * scalar_bytes
    for r in range(P):
        t.messages[r] += P - 1
        t.bytes[r] += (P - 1) * STATUS_BYTES
    return t


def zero_traffic(leaves, ranks, scalar_bytes, mode, max_piece_entries, clip, non_finite):
    """ShardExchange (shard_exchange.cpp) and the decisions of ZeroRedundancyOptimizer::step on a finite step."""
    P, t = ranks, Traffic(ranks)
    costs = leaf_costs(leaves, mode)
    units = ownership_plan(costs, P, max_piece_entries)
    region = [0] * P  # entries each rank owns
    load = [0.0] * P
    for _, b, e, cost, owner in units:
        region[owner] += e - b
        load[owner] += cost
    total = sum(region)
    mean_load = sum(load) / P
    t.extra.update(
        units=len(units),
        ranks_without_units=sum(1 for r in range(P) if not any(u[4] == r for u in units)),
        load_imbalance=max(load) / mean_load if mean_load > 0 else 1.0,
        largest_region_entries=max(region),
    )
    if P > 1:
        owners = sum(1 for q in range(P) if region[q] > 0)
        for r in range(P):
            own = region[r]
            # Reduce: my contribution to each other owner's region; gather: my region to every other rank; status.
            t.messages[r] = owners - (1 if own > 0 else 0) + (P - 1 if own > 0 else 0) + (P - 1)
            t.bytes[r] = (total - own + (P - 1) * own) * scalar_bytes + (P - 1) * STATUS_BYTES
    # drive_step (step_protocol.hpp): the squared norm is combined when clipping or checking, the first failed leaf
    # when checking; each decision is a double or a std::size_t sent to every other rank (ShardExchange::all_gather,
    # point-to-point so that a timeout names the missing ranks).
    check = non_finite != "propagate"
    decisions = (8 if clip or check else 0) + (SIZE_T_BYTES if check else 0)
    for r in range(P):
        t.messages[r] += (P - 1) * ((1 if clip or check else 0) + (1 if check else 0))
        t.bytes[r] += (P - 1) * decisions
    return t


def reference_traffic(leaves, ranks, scalar_bytes, bucket_bytes, kind):
    """A textbook all-reduce per ddp bucket: ring (2 (P - 1) messages) or Rabenseifner (2 log2 P); the bytes are
    2 (P - 1) / P of the bucket either way (the mean over ranks; a ring's chunks differ by one entry at most)."""
    P, t = ranks, Traffic(ranks)
    entries = sum(r * c for r, c in leaves)
    bucket_entries = max(1, bucket_bytes // scalar_bytes)
    buckets = (entries + bucket_entries - 1) // bucket_entries
    per_bucket = 2 * (P - 1) if kind == "ring" else 2 * (math.ceil(math.log2(P)) if P > 1 else 0)
    for r in range(P):
        t.messages[r] = buckets * per_bucket
        t.bytes[r] = round(2 * (P - 1) / P * entries * scalar_bytes)
    return t


def traffic(leaves, mode, ranks, args):
    if mode == "ddp":
        return ddp_traffic(leaves, ranks, args.scalar_bytes, args.bucket_bytes)
    if mode in REFERENCES:
        return reference_traffic(leaves, ranks, args.scalar_bytes, args.bucket_bytes, mode)
    return zero_traffic(leaves, ranks, args.scalar_bytes, mode, args.max_piece_entries, args.clip, args.non_finite)


def model(args):
    leaves = read_shapes(args.shapes)
    modes = list(args.modes) + ([] if args.no_references else list(REFERENCES))
    rows = []
    for mode in modes:
        for P in args.ranks:
            t = traffic(leaves, mode, P, args)
            rows.append(
                {
                    "mode": mode,
                    "P": P,
                    "bytes_max": max(t.bytes),
                    "bytes_mean": sum(t.bytes) / P,
                    "messages_max": max(t.messages),
                    "messages_mean": sum(t.messages) / P,
                    "collective_calls": t.collective_calls,
                    "collective_bytes": t.collective_bytes,
                    "extra": t.extra,
                    "seconds": [
                        {"gbps": g, "latency_us": a, "seconds": t.seconds(g, a * 1e-6)}
                        for a in args.latency_us
                        for g in args.gbps
                    ],
                    "per_rank": {"bytes": t.bytes, "messages": t.messages},
                }
            )
    inputs = {
        "shapes": args.shapes,
        "leaves": len(leaves),
        "entries": sum(r * c for r, c in leaves),
        "scalar_bytes": args.scalar_bytes,
        "bucket_bytes": args.bucket_bytes,
        "max_piece_entries": args.max_piece_entries,
        "clip": args.clip,
        "non_finite": args.non_finite,
    }
    return {"inputs": inputs, "rows": rows}


def fmt_bytes(b):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}" if b / scale < 100 else f"{b / scale:.0f} {unit}"
    return f"{b:.0f} B"


def fmt_seconds(s):
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def print_table(result):
    i = result["inputs"]
    print(
        f"# {i['shapes']}: {i['leaves']} leaves, {i['entries']} entries of {i['scalar_bytes']} bytes; bucket_bytes "
        f"{i['bucket_bytes']}, max_piece_entries {i['max_piece_entries']}, clip {i['clip']}, non_finite "
        f"{i['non_finite']}"
    )
    print("# time: max over ranks of messages * alpha + bytes / beta (contention and overlap ignored)")
    times = [f"{s['gbps']:g} Gb/s, {s['latency_us']:g} us" for s in result["rows"][0]["seconds"]]
    print("| mode | P | bytes/rank max | mean | messages/rank max | " + " | ".join(times) + " |")
    print("|---|---|---|---|---|" + "---|" * len(times))
    for r in result["rows"]:
        secs = " | ".join(fmt_seconds(s["seconds"]) for s in r["seconds"])
        print(
            f"| {r['mode']} | {r['P']} | {fmt_bytes(r['bytes_max'])} | {fmt_bytes(r['bytes_mean'])} | "
            f"{r['messages_max']} | {secs} |"
        )
    plans = [r for r in result["rows"] if "units" in r["extra"]]
    if plans:
        print()
        print("| mode | P | units | ranks without a unit | load max/mean | largest region (entries) |")
        print("|---|---|---|---|---|---|")
        for r in plans:
            e = r["extra"]
            print(
                f"| {r['mode']} | {r['P']} | {e['units']} | {e['ranks_without_units']} | {e['load_imbalance']:.4f} | "
                f"{e['largest_region_entries']} |"
            )


def check(path):
    """Compares a traffic_test measurement (per run, per rank, per step) with the model; 0 when every figure matches
    exactly, 1 otherwise, each difference printed."""
    with open(path, encoding="utf-8") as f:
        measured = json.load(f)
    failures = 0
    for run in measured["runs"]:
        args = argparse.Namespace(
            scalar_bytes=run["scalar_bytes"],
            bucket_bytes=run["bucket_bytes"],
            max_piece_entries=run["max_piece_entries"],
            clip=run["clip"],
            non_finite=run["non_finite"],
        )
        P = run["P"]
        t = traffic(read_shapes(run["shapes"]), run["mode"], P, args)
        label = f"{run['name']} ({run['mode']}, P = {P})"
        differences = 0
        if len(run["ranks"]) != P or any(not steps for steps in run["ranks"]):
            print(f"FAIL {label}: {len(run['ranks'])} ranks measured, each needs a step at least")
            failures += 1
            continue
        for r, steps in enumerate(run["ranks"]):
            expected = [t.bytes[r], t.messages[r], t.collective_calls, t.collective_bytes]
            for s, step in enumerate(steps):
                values = [step["bytes"], step["messages"], step["collective_calls"], step["collective_bytes"]]
                if values != expected:
                    print(f"FAIL {label}, rank {r}, step {s}: measured {values}, model {expected}")
                    differences += 1
        failures += differences
        print(
            f"{'ok' if differences == 0 else 'FAIL'} {label}, {len(run['ranks'][0])} steps: bytes per rank "
            f"{[steps[0]['bytes'] for steps in run['ranks']]}, model {t.bytes}; messages "
            f"{[steps[0]['messages'] for steps in run['ranks']]}, model {t.messages}; all-gathers "
            f"{t.collective_calls} of {t.collective_bytes} bytes"
        )
    print(f"{failures} difference(s)")
    return 1 if failures else 0


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("shapes", nargs="?", help="shapes file: one leaf per line, 'rows [cols]'")
    p.add_argument("--scalar-bytes", type=int, choices=(4, 8), default=4, help="bytes of the flat scalar (default 4)")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="modes (default: all three)")
    p.add_argument("--no-references", action="store_true", help="leave out the ring and Rabenseifner rows")
    p.add_argument(
        "--ranks", nargs="+", type=int, default=[8, 16, 64, 256, 1024], help="rank counts P (default 8 16 64 256 1024)"
    )
    p.add_argument(
        "--gbps", nargs="+", type=float, default=[10, 100, 400], help="link bandwidths in Gb/s (default 10 100 400)"
    )
    p.add_argument(
        "--latency-us", nargs="+", type=float, default=[2, 20], help="per-message latency alpha in us (default 2 20)"
    )
    p.add_argument("--bucket-bytes", type=int, default=25 << 20, help="AverageOptions::bucket_bytes (default 25 MiB)")
    p.add_argument(
        "--max-piece-entries", type=int, default=65536, help="OwnershipOptions::max_piece_entries (default 65536)"
    )
    p.add_argument("--clip", action="store_true", help="the optimizer clips (clip_norm > 0): one all-gather per step")
    p.add_argument(
        "--non-finite",
        choices=("propagate", "skip", "raise"),
        default="propagate",
        help="the optimizer's NonFinitePolicy (skip, raise: two all-gathers per finite step)",
    )
    p.add_argument("--json", action="store_true", help="print JSON, with every rank's bytes and messages")
    p.add_argument(
        "--check", metavar="MEASURED", help="compare a traffic_test JSON file with the model; exit 1 on any difference"
    )
    args = p.parse_args()
    if args.check:
        return check(args.check)
    if not args.shapes:
        p.error("a shapes file is needed (or --check)")
    if min(args.ranks) < 1 or args.bucket_bytes < 1 or args.max_piece_entries <= 0 or args.max_piece_entries % 64:
        p.error("ranks >= 1, bucket_bytes >= 1, max_piece_entries a positive multiple of 64")
    result = model(args)
    if args.json:
        json.dump(result, sys.stdout)
        print()
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
