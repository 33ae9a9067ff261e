#!/usr/bin/env python3
"""What including geomopt costs a user's build, against Eigen's own cost and against an earlier revision.

Programs, each compiled with g++ -O2 (C++20) several times, alternating, median CPU seconds (user + system):
  include_eigen     a file that only includes <Eigen/Dense>
  include_geomopt   a file that only includes <geomopt/optimizers.hpp>          goal: <= 2x include_eigen
  hello_eigen       the hello world of Eigen: a QR of an 8 x 2 matrix, printed
  hello_geomopt     the hello world of geomopt: one Stiefel leaf and one Adam step, printed
                                                                                goal: <= 1.5x hello_eigen
  project           ten files like hello_geomopt (each its own model: a Stiefel frame and a dense head, stepped by
                    Adam) and a main, compiled and linked against this tree's libraries; the same ten files built
                    against the headers of --baseline (a git revision, header-only there), as a user's project
                    built against that release; CPU seconds of all the compilations and the link
                                                                         goal: baseline / this >= 3
With --build, the same run also measures the Adam step on the build's benchmark tree against the streaming roof
(benchmarks/run_optimizers.py: the step's speed must not move with any of this).

The libraries and their compile definitions are read from --build (a configured and built tree); the headers from
this checkout. CPU time rather than wall time: other processes on a shared machine count less.

usage: benchmarks/include_cost.py --build DIR [--baseline REV] [--repeat N] [--cxx g++] [--jobs N] [--no-adam]
                                  [--quick] [--json FILE]
  --quick: one compilation of each program, no project and no Adam step (a smoke run).
"""
import argparse
import concurrent.futures
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

from bench_markdown import ROOT, positive, require, table, write_results

PY = "/usr/bin/python3"

INCLUDE_EIGEN = "#include <Eigen/Dense>\n"
INCLUDE_GEOMOPT = "#include <geomopt/optimizers.hpp>\n"

HELLO_EIGEN = """#include <Eigen/Dense>
#include <iostream>

int main() {
  const Eigen::MatrixXd a = Eigen::MatrixXd::Random(8, 2);
  const Eigen::HouseholderQR<Eigen::MatrixXd> qr(a);
  const Eigen::MatrixXd q = qr.householderQ() * Eigen::MatrixXd::Identity(8, 2);
  std::cout << q << "\\n";
}
"""

HELLO_GEOMOPT = """#include <geomopt/optimizers.hpp>
#include <iostream>

struct Model {
  geomopt::Stiefel<double> frame;
  GEOMOPT_PTREE(frame)
};

int main() {
  geomopt::Rng rng(1);
  Model params{geomopt::Stiefel<double>::random_point(rng, 8, 2)};
  Model grads = params;
  grads.frame.value().setOnes();
  geomopt::Adam adam({.lr = 0.05});
  auto state = adam.init(params);
  adam.step(params, grads, state);
  std::cout << params.frame.value() << "\\n";
}
"""


def project_file(k):
    """One file of the ten-file project: a model of its own, initialized and stepped by Adam."""
    return f"""#include <geomopt/optimizers.hpp>

namespace part{k} {{
struct Model {{
  geomopt::Stiefel<double> frame;
  Eigen::MatrixXd head;
  GEOMOPT_PTREE(frame, head)
}};
}}  // namespace part{k}

double run{k}() {{
  geomopt::Rng rng({k + 1});
  part{k}::Model params{{geomopt::Stiefel<double>::random_point(rng, {8 + k}, 2), Eigen::MatrixXd::Ones(2, 3)}};
  part{k}::Model grads = params;
  grads.frame.value().setOnes();
  grads.head.setOnes();
  geomopt::Adam adam({{.lr = 0.05}});
  auto state = adam.init(params);
  for (int step = 0; step < 3; ++step) adam.step(params, grads, state);
  return params.frame.value().norm() + params.head.norm();
}}
"""


PROJECT_MAIN = ("#include <cstdio>\n" + "".join(f"double run{k}();\n" for k in range(10)) +
                "int main() {\n  double s = 0;\n" + "".join(f"  s += run{k}();\n" for k in range(10)) +
                "  std::printf(\"%.6f\\n\", s);\n}\n")


def cpu_seconds(cmd):
    """CPU seconds (user + system) of one command (its own, read by wait4: safe to call from several threads)."""
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return usage.ru_utime + usage.ru_stime


def build_flags(build):
    """The include directories, definitions and libraries a consumer of geomopt::optimizers gets from `build`."""
    ninja = (build / "build.ninja").read_text()
    align = re.search(r"-DGEOMOPT_COMPILED_KERNELS=(\d+)", ninja)
    require(align, f"{build}: no GEOMOPT_COMPILED_KERNELS in build.ninja (is it a build of this tree?)")
    libs = [build / "manifolds" / "libgeomopt_manifolds.so", build / "optimizers" / "libgeomopt_optimizers.so"]
    require(all(p.exists() for p in libs), f"{build}: build the libraries first (geomopt_manifolds, "
            "geomopt_optimizers)")
    includes = [ROOT / c / "include" for c in ("ptree", "manifolds", "optimizers")]
    includes.append(pathlib.Path("/usr/include/eigen3"))
    compile_flags = [f"-I{d}" for d in includes] + [f"-DGEOMOPT_COMPILED_KERNELS={align.group(1)}"]
    link_flags = [str(p) for p in libs] + [f"-Wl,-rpath,{p.parent}" for p in libs]
    return compile_flags, link_flags


def baseline_headers(rev, into):
    """The include directories of revision `rev` of this repository, extracted under `into`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "ptree/include", "manifolds/include",
                              "optimizers/include"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return [f"-I{into / c / 'include'}" for c in ("ptree", "manifolds", "optimizers")] + ["-I/usr/include/eigen3"]


def compile_one(cxx, source, flags, obj=os.devnull):
    return cpu_seconds([cxx, "-std=c++20", "-O2", "-c", str(source), "-o", str(obj), *flags])


def build_project(cxx, workdir, flags, link, out, jobs):
    """CPU seconds to compile the ten files and main (`jobs` at a time: the CPU time of each compilation is its own)
    and link them; runs the program."""
    sources = sorted(workdir.glob("*.cpp"))
    objs = [out / (src.stem + ".o") for src in sources]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        total = sum(pool.map(lambda so: compile_one(cxx, so[0], flags, so[1]), zip(sources, objs)))
    exe = out / "project"
    total += cpu_seconds([cxx, *map(str, objs), "-o", str(exe), *link, "-pthread"])
    printed = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    require(re.fullmatch(r"-?[0-9.]+\n", printed), f"the project printed {printed!r}")
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="a configured and built tree of this checkout")
    ap.add_argument("--baseline", default="36bfec2", help="the revision the project is also built against")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    ap.add_argument("--jobs", type=int, default=2, help="compilations of the project at a time (default 2)")
    ap.add_argument("--no-adam", action="store_true", help="skip the Adam step")
    ap.add_argument("--quick", action="store_true", help="a smoke run (see above)")
    ap.add_argument("--json", help="also write the medians to this file")
    args = ap.parse_args()
    build = pathlib.Path(args.build).resolve()
    if args.quick:
        args.repeat = 1
    flags, link = build_flags(build)

    with tempfile.TemporaryDirectory(prefix="geomopt_ic_") as scratch:
        work = pathlib.Path(scratch)
        programs = {"include_eigen": INCLUDE_EIGEN, "include_geomopt": INCLUDE_GEOMOPT, "hello_eigen": HELLO_EIGEN,
                    "hello_geomopt": HELLO_GEOMOPT}
        for name, text in programs.items():
            (work / f"{name}.cpp").write_text(text)
        # The hello world must run: it links against the libraries and prints its point.
        exe = work / "hello"
        subprocess.run([args.cxx, "-std=c++20", "-O2", str(work / "hello_geomopt.cpp"), "-o", str(exe), *flags, *link],
                       check=True)
        printed = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
        require(len(printed.split()) == 16, f"hello_geomopt printed {printed!r}")

        times = {name: [] for name in programs}
        project = None
        if not args.quick:
            src = work / "project"
            src.mkdir()
            for k in range(10):
                (src / f"part{k}.cpp").write_text(project_file(k))
            (src / "main.cpp").write_text(PROJECT_MAIN)
            base = work / "baseline"
            base.mkdir()
            base_flags = baseline_headers(args.baseline, base)
            project = {"this": [], "baseline": []}
            objs = work / "objs"
            objs.mkdir()
        for _ in range(args.repeat):
            for name in programs:
                times[name].append(compile_one(args.cxx, work / f"{name}.cpp", flags))
            if project is not None:
                project["this"].append(build_project(args.cxx, src, flags, link, objs, args.jobs))
                project["baseline"].append(build_project(args.cxx, src, base_flags, ["-pthread"], objs, args.jobs))

    med = {k: statistics.median(v) for k, v in times.items()}
    require(all(positive(v) for v in med.values()), f"compile times {med}")
    ratios = {"include": med["include_geomopt"] / med["include_eigen"],
              "hello": med["hello_geomopt"] / med["hello_eigen"]}
    print(f"{args.cxx} -O2 -std=c++20, {args.repeat} runs each, median CPU seconds (user + system) per compilation; "
          f"libraries and definitions from {os.path.relpath(build, ROOT)}.")
    print()
    labels = {"include_eigen": "`#include <Eigen/Dense>`", "include_geomopt": "`#include <geomopt/optimizers.hpp>`",
              "hello_eigen": "hello world, Eigen QR", "hello_geomopt": "hello world, one Stiefel leaf + Adam step"}
    refs = {"include_geomopt": ("include_eigen", "<= 2"), "hello_geomopt": ("hello_eigen", "<= 1.5")}
    rows = []
    for name in programs:
        ref = refs.get(name)
        ratio = f"**{med[name] / med[ref[0]]:.2f}** (goal {ref[1]})" if ref else ""
        rows.append([labels[name], f"{med[name]:.2f} s", ratio, ", ".join(f"{t:.2f}" for t in times[name])])
    table(["program", "median", "ratio to Eigen's", "runs"], rows)
    results = {"seconds": med, "ratios": ratios, "repeat": args.repeat, "cxx": args.cxx}
    if project is not None:
        pm = {k: statistics.median(v) for k, v in project.items()}
        require(all(positive(v) for v in pm.values()), f"project times {pm}")
        ratios["project"] = pm["baseline"] / pm["this"]
        print(f"A project of ten such files and a main (each file its own model: St(8 + k, 2) and a 2 x 3 head, three "
              f"Adam steps), compiled and linked; CPU seconds of all its compilations and the link:")
        print()
        table(["headers", "median", "runs"],
              [[f"this tree (libraries from {os.path.relpath(build, ROOT)})", f"{pm['this']:.1f} s",
                ", ".join(f"{t:.1f}" for t in project["this"])],
               [f"revision {args.baseline}, header-only", f"{pm['baseline']:.1f} s",
                ", ".join(f"{t:.1f}" for t in project["baseline"])]])
        print(f"Baseline / this: **{ratios['project']:.2f}** (goal >= 3).")
        print()
        results["project_seconds"] = pm
    if not args.quick and not args.no_adam:
        j = pathlib.Path(tempfile.mkstemp(suffix=".json")[1])
        out = subprocess.run([PY, str(ROOT / "benchmarks" / "run_optimizers.py"), "--build", str(build),
                              "--skip-torch", "--skip-manifold", "--repetitions", "5", "--json", str(j)],
                             check=True, capture_output=True, text=True).stdout
        adam = __import__("json").loads(j.read_text())["ratios"]
        j.unlink()
        roof = adam["roof / Adam, 1 thread"]
        require(positive(roof), f"roof / Adam {roof}")
        print(f"The Adam step in the same run (benchmarks/run_optimizers.py on {os.path.relpath(build, ROOT)}'s "
              f"tree): streaming roof / Adam step, 1 thread **{roof:.2f}**, 2 threads "
              f"{adam['roof / Adam, 2 threads']:.2f} (goal >= 0.9).")
        print()
        results["roof_over_adam"] = {"1 thread": roof, "2 threads": adam["roof / Adam, 2 threads"]}
        del out
    write_results(args.json, results)


if __name__ == "__main__":
    main()
