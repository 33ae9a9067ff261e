// Saving and loading the 369-leaf tree (78M floats, transformer369_d512.shapes) with geomopt::io, each operation
// timed once per process (after an untimed warm-up) so that benchmarks/run_io.py can interleave it with h5py writing
// and reading the same arrays.
//
//   io_bench DIR          prints one JSON line: seconds for each operation and the bytes of parameters; guard_cpu is
//                         the CPU seconds (user + system) of the crash guard's child during the default load, a
//                         figure that a busy machine stretches less than wall time
// Each operation writes or reads DIR/geomopt.h5. The tree's values are fixed (a seeded generator), so h5py can read
// the very arrays from the file this program leaves behind.
#include <geomopt/io.hpp>

#include <tree369.hpp>

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>

namespace {

// CPU seconds used by this process's children that have been waited for.
double children_cpu() {
  rusage u{};
  ::getrusage(RUSAGE_CHILDREN, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Tree369 make_tree(unsigned seed) {
  Tree369 t;
  std::size_t i = 0;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  geomopt::ptree::for_each(
      [&](auto& leaf) {
        const auto& s = kTree369Shapes[i++];
        leaf.resize(s[0], s[1]);
        for (Eigen::Index k = 0; k < leaf.size(); ++k) leaf.data()[k] = u(rng);
      },
      t);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: io_bench DIR\n");
    return 2;
  }
  const std::string file = std::string(argv[1]) + "/geomopt.h5";
  const Tree369 tree = make_tree(42);
  Tree369 into = make_tree(7);
  const double bytes = static_cast<double>(geomopt::ptree::nbytes(tree));

  // One untimed save and load first: the runner's h5py side lives in one process across repetitions, so neither
  // side's timings should include a process's first-call costs (library start-up, first page faults).
  geomopt::io::save(file, tree, {.durable = false});
  geomopt::io::load(file, into, {.isolate = false});

  auto t0 = std::chrono::steady_clock::now();
  geomopt::io::save(file, tree, {.durable = false});
  const double save = seconds_since(t0);

  const double cpu0 = children_cpu();
  t0 = std::chrono::steady_clock::now();
  geomopt::io::load(file, into);
  const double load = seconds_since(t0);
  const double guard_cpu = children_cpu() - cpu0;

  t0 = std::chrono::steady_clock::now();
  geomopt::io::load(file, into, {.isolate = false});
  const double load_trusted = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  geomopt::io::save(file, tree);
  const double save_durable = seconds_since(t0);

  if (geomopt::ptree::flatten(into) != geomopt::ptree::flatten(tree)) {
    std::fprintf(stderr, "io_bench: the loaded tree differs from the saved one\n");
    return 1;
  }
  std::printf(
      "{\"bytes\": %.0f, \"save\": %.6f, \"save_durable\": %.6f, \"load\": %.6f, \"load_trusted\": %.6f, "
      "\"guard_cpu\": %.6f}\n",
      bytes, save, save_durable, load, load_trusted, guard_cpu);
  return 0;
}
