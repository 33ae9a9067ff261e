#!/usr/bin/python3
"""geomopt::io against h5py: saving and loading the benchmark tree (the 369-leaf D=512 tree, 78M float32, 312 MB; or
benchmarks/tree_small.shapes where the shared file is missing: GEOMOPT_IO_BENCH_SHAPES), in one run.

    /usr/bin/python3 benchmarks/run_io.py BUILD_DIR [--reps 5] [--dir DIR] [--no-wait] [--quick] [--json FILE]

--quick: 1 repetition, no waiting for a quiet machine, files in a temporary folder, and h5py's reads compared with
the arrays geomopt saved.

BUILD_DIR holds benchmarks/io_bench (configure with -DGEOMOPT_BUILD_BENCHMARKS=ON). Each repetition runs io_bench
once (after its untimed warm-up: geomopt save without and with fsync, load with and without the crash guard), then
h5py, in this one process (warmed up by its first repetition), writes and reads the
very arrays io_bench saved (read back from its file, outside the timings): a plain write, a write made as durable
as geomopt's (temporary file, fsync, rename, fsync of the directory), and reads the file geomopt loaded into new
arrays and with read_direct into preallocated ones. Medians of the repetitions; the ratio is geomopt's throughput over h5py's (above 1: geomopt is
faster). Waits while /tmp/geomopt_quiet exists or a compiler (cc1plus) runs, so that nothing else is measured;
--no-wait measures at once (on a machine shared with builds): the ratios stay meaningful within the run, and the load
average of each repetition is printed with the figures. The CPU time of the crash guard's child during the default
load (io_bench's guard_cpu) is reported too: a busy machine stretches it less than the wall time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_markdown import positive, require, table, write_results  # noqa: E402


def machine_busy():
    compilers = subprocess.run(["pgrep", "cc1plus"], capture_output=True, text=True).stdout.split()
    return os.path.exists("/tmp/geomopt_quiet") or bool(compilers)


def wait_quiet(limit_s):
    start = time.time()
    while machine_busy():
        if time.time() - start > limit_s:
            print(f"run_io.py: still busy after {limit_s} s; measuring anyway", file=sys.stderr)
            return False
        time.sleep(5)
    return True


def fsync_path(path, directory=False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def h5py_save(arrays, path, durable):
    target = path + ".tmp" if durable else path
    with h5py.File(target, "w") as f:
        g = f.create_group("params")
        for name, a in arrays:
            g.create_dataset(name, data=a)
    if durable:
        fsync_path(target)
        os.replace(target, path)
        fsync_path(os.path.dirname(path) or ".", directory=True)


def h5py_load(names, path):
    with h5py.File(path, "r") as f:
        g = f["params"]
        return [g[n][()] for n in names]


def h5py_load_direct(out, path):
    with h5py.File(path, "r") as f:
        g = f["params"]
        for name, a in out:
            g[name].read_direct(a)


def timed(fn, *args):
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build_dir")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where the files go (default: BUILD_DIR/benchmarks/io_files)")
    ap.add_argument("--wait", type=int, default=1800, help="seconds to wait for a quiet machine")
    ap.add_argument("--no-wait", action="store_true", help="measure at once, busy or not (same as --wait 0)")
    ap.add_argument("--quick", action="store_true", help="a smoke run (see above)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.no_wait:
        args.wait = 0
    if args.quick:
        args.reps, args.wait = 1, 0
        scratch = tempfile.TemporaryDirectory(prefix="geomopt_io_bench_")
        args.dir = args.dir or scratch.name

    bench = os.path.join(args.build_dir, "benchmarks", "io_bench")
    work = args.dir or os.path.join(args.build_dir, "benchmarks", "io_files")
    os.makedirs(work, exist_ok=True)
    geomopt_file = os.path.join(work, "geomopt.h5")
    h5py_file = os.path.join(work, "h5py.h5")

    times = {k: [] for k in ("save", "save_durable", "load", "load_trusted",
                             "h5py_save", "h5py_save_durable", "h5py_load", "h5py_load_direct")}
    guard_cpu = []
    arrays = None
    loads = []
    for rep in range(args.reps):
        quiet = wait_quiet(args.wait)
        loads.append(os.getloadavg()[0])
        g = json.loads(subprocess.run([bench, work], check=True, capture_output=True, text=True).stdout)
        for k in ("save", "save_durable", "load", "load_trusted"):
            require(positive(g.get(k)), f"io_bench: no time for {k}")
            times[k].append(g[k])
        guard_cpu.append(g.get("guard_cpu", float("nan")))
        nbytes = g["bytes"]
        if arrays is None:
            with h5py.File(geomopt_file, "r") as f:
                names = sorted(f["params"].keys(), key=lambda n: int(n[1:]))  # p0, p1, ...
                arrays = [(n, f["params"][n][()]) for n in names]
            assert sum(a.nbytes for _, a in arrays) == nbytes
            names = [n for n, _ in arrays]
            direct = [(n, np.empty_like(a)) for n, a in arrays]
        times["h5py_save"].append(timed(h5py_save, arrays, h5py_file, False))
        # h5py reads the very file geomopt just loaded (same bytes, same place in the page cache).
        times["h5py_load"].append(timed(h5py_load, names, geomopt_file))
        if args.quick:
            require(all(np.array_equal(a, b) for (_, a), b in zip(arrays, h5py_load(names, geomopt_file))),
                    "h5py read other values than geomopt saved")
        times["h5py_load_direct"].append(timed(h5py_load_direct, direct, geomopt_file))
        times["h5py_save_durable"].append(timed(h5py_save, arrays, h5py_file, True))
        print(f"rep {rep}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in times.items())
              + f", guard child CPU {guard_cpu[-1]:.3f} s, load average {loads[-1]:.2f}"
              + ("" if quiet else " (machine busy)"), file=sys.stderr)

    med = {k: statistics.median(v) for k, v in times.items()}
    mbps = {k: nbytes / v / 1e6 for k, v in med.items()}

    def row(what, ours, theirs):
        return [what, f"{mbps[ours]:.0f}", f"{mbps[theirs]:.0f}", f"{med[theirs] / med[ours]:.2f}x"]

    print(f"{len(arrays)} leaves, {nbytes / 1e6:.1f} MB of float32; median of {args.reps} repetitions; "
          f"load average {min(loads):.2f}-{max(loads):.2f} while measuring ({', '.join(f'{x:.2f}' for x in loads)})\n")
    table(["operation", "geomopt MB/s", "h5py MB/s", "geomopt / h5py"], [
        row("save, no fsync (geomopt: temporary file + rename) vs h5py File('w')", "save", "h5py_save"),
        row("save, durable (fsync file and directory, rename) vs the same with h5py", "save_durable",
            "h5py_save_durable"),
        row("load (default: crash guard, every check before the tree changes) vs h5py dataset[()]", "load", "h5py_load"),
        row("load (default) vs h5py read_direct into preallocated arrays", "load", "h5py_load_direct"),
        row("load, isolate = false vs h5py read_direct", "load_trusted", "h5py_load_direct"),
    ])
    print(f"\nThe crash guard: the default load takes {med['load'] / med['load_trusted']:.2f}x the time of a load with "
          f"isolate = false ({1e3 * (med['load'] - med['load_trusted']):.0f} ms more, median); its child used "
          f"{1e3 * statistics.median(guard_cpu):.0f} ms of CPU (median).")
    write_results(args.json, {"leaves": len(arrays), "bytes": nbytes, "reps": args.reps, "mb_per_s": mbps,
                              "seconds": med, "guard_cpu_seconds": statistics.median(guard_cpu),
                              "load_averages": loads, "files": work})


if __name__ == "__main__":
    main()
