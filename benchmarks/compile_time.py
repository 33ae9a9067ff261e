#!/usr/bin/env python3
"""Compile time of the ptree walks against plain loops, on the 369-leaf tree.

Generates two translation units from the shapes file:
  ptree.cpp  one flat struct of 369 Eigen leaves with a hand-written ptree_walk; every walk (for_each,
             for_each_with_path, map, map_into, fold, for_each_storage, fold_storage) instantiated at arities 1 to 6;
  loops.cpp  the same work written as loops over std::vector<Eigen::MatrixXf>.
Compiles each with g++ -O2 several times, alternating, and prints the medians and their ratio (ptree / loops).
Two control programs split the ptree figure: the headers and the struct declaration alone, and those plus one map
(the struct's constructor and destructor, its child layout and one walk: what any program that copies it pays).

usage: benchmarks/compile_time.py [--shapes FILE] [--repeat N] [--cxx g++] [--keep DIR] [--work light|step]
                                  [--quick] [--json FILE]
  --shapes defaults to ../shared/bench/transformer369_d256.shapes, or benchmarks/tree_small.shapes without it.
  --quick: the small tree, arities 1 and 2, one compilation of the two programs the ratio is between (a smoke run).
"""
import argparse
import os
import pathlib
import re
import resource
import statistics
import subprocess
import sys
import tempfile

from bench_markdown import (ROOT, SMALL_SHAPES, default_shapes, positive, read_shapes, require, table,
                            write_results)

ARITIES = range(1, 7)


def leaf_type(shape, mixed):
    """Eigen::MatrixXf for every leaf, as in the loops program; with `mixed`, Eigen::VectorXf for the vectors."""
    return "Eigen::VectorXf" if mixed and len(shape) == 1 else "Eigen::MatrixXf"


# The per-leaf work, identical in both programs. `a` is the leaf of tree 0, `b...` those of the other trees.
# "light" is the least a walk can do; "step" is shaped like an optimizer's per-leaf update (a few fused Eigen
# expressions), which is what the walks exist for.
WORK = {
    "light": {
        "update": "a.array() *= 0.5f; ((a.array() += b.array()), ...);",
        "map": "auto r = a.eval(); ((r.array() += b.array()), ...); return r;",
        "fold": "return acc + a.squaredNorm() + (0.0f + ... + b.squaredNorm());",
    },
    "step": {
        "update": "a.array() = 0.9f * a.array() + 0.1f * a.array().abs().sqrt(); "
                  "((a.array() -= 1e-3f * b.array() / (b.array().abs().sqrt() + 1e-8f)), ...);",
        "map": "auto r = (0.9f * a.array() + 0.1f * a.array().square()).matrix().eval(); "
               "((r.array() += b.array() / (b.array().abs() + 1e-8f)), ...); return r;",
        "fold": "return acc + a.squaredNorm() + a.cwiseAbs().maxCoeff() + (0.0f + ... + a.cwiseProduct(b).sum());",
    },
}
BODY_UPDATE = BODY_MAP = BODY_FOLD = ""


def set_work(name):
    global BODY_UPDATE, BODY_MAP, BODY_FOLD
    BODY_UPDATE, BODY_MAP, BODY_FOLD = WORK[name]["update"], WORK[name]["map"], WORK[name]["fold"]


def ptree_program(shapes, mixed):
    members = "\n".join(f"  {leaf_type(s, mixed)} p{i};" for i, s in enumerate(shapes))
    visits = "\n".join(f'    visit("p{i}", self.p{i}...);' for i in range(len(shapes)))
    children = ", ".join(leaf_type(s, mixed) for s in shapes)
    out = [
        "#include <geomopt/ptree.hpp>",
        "namespace gp = geomopt::ptree;",
        "struct Tree {",
        members,
        "  template <class Visit, class... Self> static void ptree_walk(Visit&& visit, Self&&... self) {",
        visits,
        "  }",
        f"  using ptree_children = gp::children<{children}>;",
        "};",
        "float sink;",
    ]
    for k in ARITIES:
        trees = ", ".join(f"t{j}" for j in range(1, k))
        params = ", ".join(f"const Tree& t{j}" for j in range(1, k))
        sep = ", " if k > 1 else ""
        out += [
            f"void run{k}(Tree& t0{sep}{params}) {{",
            f"  gp::for_each([](auto& a, const auto&... b) {{ {BODY_UPDATE} }}, t0{sep}{trees});",
            "  std::size_t n = 0;",
            f"  gp::for_each_with_path([&](const gp::Path& p, auto& a, const auto&... b) {{ n += p.size(); {BODY_UPDATE} }}, t0{sep}{trees});",
            f"  Tree m = gp::map([](const auto& a, const auto&... b) {{ {BODY_MAP} }}, t0{sep}{trees});",
            f"  gp::map_into([](const auto& a, const auto&... b) {{ {BODY_MAP} }}, t0, m{sep}{trees});" if k > 1 else
            f"  gp::map_into([](const auto& a) {{ auto r = a.eval(); r.array() *= 2.0f; return r; }}, t0, m);",
            f"  float f = gp::fold([](float acc, const auto& a, const auto&... b) {{ {BODY_FOLD} }}, 0.0f, t0{sep}{trees});",
            f"  gp::for_each_storage([](auto& a, const auto&... b) {{ {BODY_UPDATE} }}, t0{sep}{trees});",
            f"  f += gp::fold_storage([](float acc, const auto& a, const auto&... b) {{ {BODY_FOLD} }}, 0.0f, t0{sep}{trees});",
            "  sink += f + float(n);",
            "}",
        ]
    return "\n".join(out) + "\n"


def struct_program(shapes):
    """What any program that walks and copies the struct pays once: the struct's constructor and destructor (an
    exception cleanup per member), its child layout and one walk. The rest of ptree.cpp is the walks themselves."""
    src = ptree_program(shapes, mixed=False)
    head = src.split("float sink;", 1)[0]
    return head + ("float sink;\n"
                   "Tree copy(const Tree& t) { return gp::map([](const auto& a) { return a; }, t); }\n")


def loops_program(shapes):
    n = len(shapes)
    out = [
        "#include <Eigen/Core>",
        "#include <string>",
        "#include <vector>",
        "using Leaves = std::vector<Eigen::MatrixXf>;",
        "std::vector<std::string> names;",
        "float sink;",
    ]
    for k in ARITIES:
        params = ", ".join(f"const Leaves& t{j}" for j in range(1, k))
        sep = ", " if k > 1 else ""
        at = "".join(f", t{j}[i]" for j in range(1, k))
        at_m = "".join(f", t{j}[i]" for j in range(1, k))
        out += [
            f"void run{k}(Leaves& t0{sep}{params}) {{",
            f"  auto upd = [](auto& a, const auto&... b) {{ {BODY_UPDATE} }};",
            f"  for (std::size_t i = 0; i < {n}; ++i) upd(t0[i]{at});",
            "  std::size_t n = 0;",
            f"  auto updp = [&](const std::string& p, auto& a, const auto&... b) {{ n += p.size(); {BODY_UPDATE} }};",
            f"  for (std::size_t i = 0; i < {n}; ++i) updp(names[i], t0[i]{at});",
            f"  auto mp = [](const auto& a, const auto&... b) {{ {BODY_MAP} }};",
            f"  Leaves m({n});",
            f"  for (std::size_t i = 0; i < {n}; ++i) m[i] = mp(t0[i]{at});",
            (f"  auto mp2 = [](const auto& a, const auto&... b) {{ {BODY_MAP} }};\n"
             f"  for (std::size_t i = 0; i < {n}; ++i) t0[i] = mp2(m[i]{at_m});" if k > 1 else
             f"  auto m1 = [](const auto& a) {{ auto r = a.eval(); r.array() *= 2.0f; return r; }};\n"
             f"  for (std::size_t i = 0; i < {n}; ++i) t0[i] = m1(m[i]);"),
            f"  auto fd = [](float acc, const auto& a, const auto&... b) {{ {BODY_FOLD} }};",
            "  float f = 0;",
            f"  for (std::size_t i = 0; i < {n}; ++i) f = fd(f, t0[i]{at});",
            f"  auto upd2 = [](auto& a, const auto&... b) {{ {BODY_UPDATE} }};",
            f"  for (std::size_t i = 0; i < {n}; ++i) upd2(t0[i]{at});",
            f"  auto fd2 = [](float acc, const auto& a, const auto&... b) {{ {BODY_FOLD} }};",
            f"  for (std::size_t i = 0; i < {n}; ++i) f = fd2(f, t0[i]{at});",
            "  sink += f + float(n);",
            "}",
        ]
    return "\n".join(out) + "\n"


def helper_loops_program(shapes):
    """The loops program with each loop moved into one helper, `each(body)`, as a programmer who writes the loop once
    would: every loop is then a function of its own, as every walk is, and g++ gives each the same inlining budget
    (in loops.cpp, the 42 loops share one function's budget, and the Eigen kernels stay out of line)."""
    src = re.sub(r"for \(std::size_t i = 0; i < \d+; \+\+i\) ([^;]+);", r"each([&](std::size_t i) { \1; });",
                 loops_program(shapes))
    helper = f"template <class F> void each(F body) {{ for (std::size_t i = 0; i < {len(shapes)}; ++i) body(i); }}\n"
    return src.replace("float sink;\n", "float sink;\n" + helper, 1)


def compile_seconds(cxx, source, include_dirs):
    """CPU seconds (user + system) of one compilation: steadier than wall time on a shared machine."""
    cmd = [cxx, "-std=c++20", "-O2", "-c", str(source), "-o", os.devnull]
    for d in include_dirs:
        cmd += ["-I", str(d)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    ap.add_argument("--keep", help="write the generated sources to this folder")
    ap.add_argument("--work", choices=sorted(WORK), default="light", help="the per-leaf work (default: light)")
    ap.add_argument("--quick", action="store_true", help="a smoke run (see above)")
    ap.add_argument("--json", help="also write the medians to this file")
    args = ap.parse_args()
    if args.quick:
        global ARITIES
        args.repeat, ARITIES = 1, range(1, 3)
        args.shapes = args.shapes or str(SMALL_SHAPES)
    args.shapes = args.shapes or str(default_shapes())

    if not pathlib.Path(args.shapes).exists():
        sys.exit(f"compile_time.py: shapes file not found: {args.shapes}")
    shapes = read_shapes(args.shapes)
    set_work(args.work)
    scratch = None if args.keep else tempfile.TemporaryDirectory(prefix="geomopt_ct_")  # removed at exit
    workdir = pathlib.Path(args.keep or scratch.name)
    workdir.mkdir(parents=True, exist_ok=True)
    sources = {
        "loops": workdir / "loops.cpp",
        "loops_helper": workdir / "loops_helper.cpp",
        "ptree": workdir / "ptree.cpp",
        "ptree_mixed": workdir / "ptree_mixed.cpp",
        "struct": workdir / "struct.cpp",
        "headers": workdir / "headers.cpp",
    }
    sources["loops"].write_text(loops_program(shapes))
    sources["loops_helper"].write_text(helper_loops_program(shapes))
    sources["ptree"].write_text(ptree_program(shapes, mixed=False))
    sources["ptree_mixed"].write_text(ptree_program(shapes, mixed=True))
    sources["struct"].write_text(struct_program(shapes))
    sources["headers"].write_text(ptree_program(shapes, mixed=False).split("float sink;", 1)[0])
    includes = [ROOT / "ptree" / "include", "/usr/include/eigen3"]
    if args.quick:
        sources = {k: sources[k] for k in ("loops", "ptree")}

    times = {name: [] for name in sources}
    for _ in range(args.repeat):
        for name, src in sources.items():
            times[name].append(compile_seconds(args.cxx, src, includes))
    med = {k: statistics.median(v) for k, v in times.items()}
    require(all(positive(v) for v in med.values()), f"compile times {med}")
    labels = {
        "loops": "loops over std::vector<Eigen::MatrixXf>",
        "loops_helper": "the same loops, each in a helper function",
        "ptree": "ptree walks, flat struct of MatrixXf",
        "ptree_mixed": "ptree walks, MatrixXf + VectorXf leaves",
        "struct": "  of which: headers + struct + one map",
        "headers": "  of which: headers + struct declaration",
    }
    print(f"{len(shapes)} leaves ({pathlib.Path(args.shapes).name}), arities {ARITIES[0]}..{ARITIES[-1]}, 7 walks, "
          f"{args.work} per-leaf work, {args.cxx} -O2, {args.repeat} runs each, median CPU seconds (user + system) "
          "per compilation.")
    print()
    table(["program", "median", "ratio to the loops", "runs"],
          [[labels[name].strip(), f"{med[name]:.2f} s",
            f"**{med[name] / med['loops']:.2f}**" if name == "ptree" else f"{med[name] / med['loops']:.2f}",
            ", ".join(f"{t:.2f}" for t in times[name])] for name in sources])
    results = {"leaves": len(shapes), "shapes": pathlib.Path(args.shapes).name, "work": args.work, "cxx": args.cxx,
               "repeat": args.repeat, "seconds": med, "ratio": med["ptree"] / med["loops"]}
    if not args.quick:
        walks = med["ptree"] - med["struct"]
        loop_work = med["loops"] - med["headers"]
        results["walks_over_loops_beyond_fixed_cost"] = walks / loop_work
        print(f"The 42 walks beyond the struct's one-time cost: {walks:.2f} s; the loops beyond the headers: "
              f"{loop_work:.2f} s (ratio {walks / loop_work:.2f}).")
        print()
    write_results(args.json, results)

if __name__ == "__main__":
    main()
