// The optimizer step against the memory roof, each case timed in the same process with its repetitions interleaved
// (case A, case B, ..., case A, case B, ...), so a noisy stretch of the shared machine hits every case alike.
//
//   roof_1t, roof_2t      the streaming roof of Adam's traffic on the 369-leaf tree's size (20,153,696 floats): per
//                         chunk of 512 entries, t = a + c; a = b; c = d; d = t (reads 4 arrays, writes 3, as Adam
//                         reads p, g, m, v and writes p, m, v), flat arrays, 1 thread / 2 threads (halves, a
//                         persistent worker thread)
//   roof32_1t             the same with 3 reads and 2 writes (t = a + c; a = b; b = t): SGD with momentum's traffic
//   adam_1t, adam_2t      geomopt::Adam({.lr = 1e-3}) step on the 369-leaf tree (float), threads 1 / 2
//   adamw_1t, sgd_1t      geomopt::AdamW({.lr = 1e-3}) (weight_decay 1e-2) and SGD({.lr = 1e-3, .momentum = 0.9})
//   policy group          adam_skip_1t, adam_raise_1t: adam_1t under NonFinitePolicy::skip / ::raise (what the
//                         check of the gradients, the norm and the kernel's outputs costs against adam_1t)
//   roof_l2, adam_l2      diagnostics: the roof kernel and the Adam step on 16,384 entries (4 x 64 KiB, cache
//                         resident), the arithmetic throughput when memory is not the limit
//   diag group            diagnostic kernels run through geomopt::Optimizer on the 369-leaf tree, 1 thread, with
//                         Adam's traffic: adam_nosqrt_1t (v in place of sqrt(v): not Adam), adam_nosqrtdiv_1t
//                         (neither square root nor division: not Adam), adam_fused_1t (Adam in one pass per
//                         entry over Eigen packets with the hardware square root, constants folded)
//   eu/N, rec/N, tra/N    N = 64 ... 4096, n = 16, float: one N x n leaf stepped by Adam, as a Euclidean MatrixXf
//                         (the reference), as a Stiefel<float> with SectionPolicy::recomputed and with ::transported
//                         (Retraction::cayley)
//
// usage: optimizers_bench [--cases=NAME,NAME,...|all|tree|manifold|diag] [--reps=R] [--warmup=W] [--min-ms=M]
// Prints one JSON object: per case the seconds per step of each repetition (a repetition of a fast case runs enough
// steps to last --min-ms, calibrated during warm-up), and the numbers of entries. benchmarks/run_optimizers.py
// runs it.
#include <benchmark/benchmark.h>

#include <immintrin.h>
#include <Eigen/Core>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <geomopt/optimizers.hpp>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tree369.hpp"

namespace gp = geomopt::ptree;

namespace {

using Clock = std::chrono::steady_clock;

constexpr Eigen::Index kRoofChunk = 512;

// ---------------------------------------------------------------------------------------------------------------
// The roof kernels: Eigen maps over chunks of 512 entries, so the copies and the add are vectorised at -O2 with
// any -march, and every array is read once from memory and the written ones written back once.
using ArrayMap = Eigen::Map<Eigen::ArrayXf>;

// Reads a, b, c, d; writes a, c, d.
void roof43(float* a, const float* b, float* c, float* d, Eigen::Index n) {
  alignas(64) float tbuf[kRoofChunk];
  for (Eigen::Index i = 0; i < n; i += kRoofChunk) {
    const Eigen::Index len = std::min(kRoofChunk, n - i);
    ArrayMap t(tbuf, len), ai(a + i, len), ci(c + i, len), di(d + i, len);
    Eigen::Map<const Eigen::ArrayXf> bi(b + i, len);
    t = ai + ci;
    ai = bi;
    ci = di;
    di = t;
  }
}

// Reads a, b, c; writes a, b.
void roof32(float* a, float* b, const float* c, Eigen::Index n) {
  alignas(64) float tbuf[kRoofChunk];
  for (Eigen::Index i = 0; i < n; i += kRoofChunk) {
    const Eigen::Index len = std::min(kRoofChunk, n - i);
    ArrayMap t(tbuf, len), ai(a + i, len), bi(b + i, len);
    Eigen::Map<const Eigen::ArrayXf> ci(c + i, len);
    t = ai + ci;
    ai = bi;
    bi = t;
  }
}

Eigen::ArrayXf random_array(Eigen::Index n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Eigen::ArrayXf a(n);
  for (Eigen::Index i = 0; i < n; ++i) a[i] = u(rng);
  return a;
}

Tree369 make_tree(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tree369 t;
  std::size_t i = 0;
  gp::for_each(
      [&](auto& leaf) {
        const auto [rows, cols] = kTree369Shapes[i++];
        if constexpr (std::decay_t<decltype(leaf)>::ColsAtCompileTime == 1) {
          leaf.resize(rows);
        } else {
          leaf.resize(rows, cols);
        }
        for (Eigen::Index k = 0; k < leaf.size(); ++k) leaf.data()[k] = u(rng);
      },
      t);
  return t;
}

// One flat leaf, for the cache-resident diagnostic.
struct FlatTree {
  Eigen::VectorXf w;
  GEOMOPT_PTREE(w)
};

// One N x n leaf: Euclidean, and on the Stiefel manifold.
struct MatTree {
  Eigen::MatrixXf w;
  GEOMOPT_PTREE(w)
};
struct StiefelTree {
  geomopt::Stiefel<float> w;
  GEOMOPT_PTREE(w)
};

// ---------------------------------------------------------------------------------------------------------------
// Diagnostic kernels: Adam's options, state and traffic, with parts of the arithmetic changed (see the top).
inline __m128 hw_sqrt(__m128 x) { return _mm_sqrt_ps(x); }
#ifdef __AVX__
inline __m256 hw_sqrt(__m256 x) { return _mm256_sqrt_ps(x); }
#endif
#ifdef __AVX512F__
inline __m512 hw_sqrt(__m512 x) { return _mm512_sqrt_ps(x); }
#endif

enum class Variant { nosqrt, nosqrtdiv, fused };

template <Variant V>
struct DiagAdamKernel : geomopt::AdamKernel {
  template <class T>
  static void update(const Coeffs<T>& c, geomopt::Chunk<T>& x) {
    static_assert(std::is_same_v<T, float>);
    auto& m = x.s[0];
    auto& v = x.s[1];
    if constexpr (V == Variant::fused) {
      namespace ei = Eigen::internal;
      using P = ei::packet_traits<float>::type;
      constexpr auto L = static_cast<Eigen::Index>(sizeof(P) / sizeof(float));
      float *p = x.p.data(), *mm = m.data(), *vv = v.data();
      const float* g = x.g.data();
      const Eigen::Index n = x.p.size();
      // p -= step (m / (sqrt(v) / sqrt(bc2) + eps)) = p - (step sqrt(bc2)) m / (sqrt(v) + eps sqrt(bc2))
      const float step = c.step_size / c.inv_bc2_sqrt, eps = c.eps / c.inv_bc2_sqrt;
      const P b1 = ei::pset1<P>(c.b1), o1 = ei::pset1<P>(c.one_minus_b1), b2 = ei::pset1<P>(c.b2),
              o2 = ei::pset1<P>(c.one_minus_b2), st = ei::pset1<P>(step), ep = ei::pset1<P>(eps);
      Eigen::Index i = 0;
      for (; i + L <= n; i += L) {
        const P gi = ei::ploadu<P>(g + i);
        const P mi = ei::padd(ei::pmul(b1, ei::ploadu<P>(mm + i)), ei::pmul(o1, gi));
        const P vi = ei::padd(ei::pmul(b2, ei::ploadu<P>(vv + i)), ei::pmul(ei::pmul(o2, gi), gi));
        ei::pstoreu(mm + i, mi);
        ei::pstoreu(vv + i, vi);
        const P d = ei::padd(hw_sqrt(vi), ep);
        ei::pstoreu(p + i, ei::psub(ei::ploadu<P>(p + i), ei::pdiv(ei::pmul(st, mi), d)));
      }
      for (; i < n; ++i) {
        mm[i] = c.b1 * mm[i] + c.one_minus_b1 * g[i];
        vv[i] = c.b2 * vv[i] + c.one_minus_b2 * g[i] * g[i];
        p[i] -= step * mm[i] / (std::sqrt(vv[i]) + eps);
      }
      return;
    }
    m = c.b1 * m + c.one_minus_b1 * x.g;
    v = c.b2 * v + c.one_minus_b2 * x.g.square();
    if constexpr (V == Variant::nosqrt) {
      x.p -= c.step_size * (m / (v * c.inv_bc2_sqrt + c.eps));
    } else {
      x.p -= c.step_size * (m * (v * c.inv_bc2_sqrt + c.eps));
    }
  }
};

// ---------------------------------------------------------------------------------------------------------------
struct Case {
  std::string name;
  double entries = 0;              // entries stepped (or streamed) per call
  std::function<void()> call;      // one step
  long inner = 1;                  // calls per repetition, calibrated in warm-up
  std::vector<double> seconds;     // per call, one per repetition
  std::function<double()> defect;  // manifold cases: ||Y^T Y - I|| of the leaf after the run
};

// Shared data, built on first use.
struct Data {
  std::unique_ptr<Tree369> params, grads;
  std::vector<Eigen::ArrayXf> roof;                   // 4 arrays of the tree's size
  std::unique_ptr<geomopt::detail::ThreadPool> pool;  // the optimizers' own team, so both sides dispatch alike

  Tree369& p() {
    if (!params) {
      params = std::make_unique<Tree369>(make_tree(1));
      grads = std::make_unique<Tree369>(make_tree(2));
    }
    return *params;
  }
  Tree369& g() {
    p();
    return *grads;
  }
  std::vector<Eigen::ArrayXf>& arrays() {
    if (roof.empty()) {
      const Eigen::Index n = gp::count(p());
      for (unsigned s = 0; s < 4; ++s) roof.push_back(random_array(n, 10 + s));
    }
    return roof;
  }

  geomopt::detail::ThreadPool& threads() {
    if (!pool) pool = std::make_unique<geomopt::detail::ThreadPool>(2);
    return *pool;
  }
};

template <class Opt, class Tree>
Case optimizer_case(std::string name, Opt opt, Tree& params, const Tree& grads) {
  auto o = std::make_shared<Opt>(std::move(opt));
  auto st = std::make_shared<decltype(o->init(params))>(o->init(params));
  Case c;
  c.name = std::move(name);
  c.entries = static_cast<double>(gp::count(params));
  c.call = [o, st, &params, &grads] {
    o->step(params, grads, *st);
    benchmark::ClobberMemory();
  };
  return c;
}

// A tree and its gradient, kept alive by the case.
template <class Tree>
struct Owned {
  Tree params, grads;
};

template <class Opt, class Tree>
Case owned_case(std::string name, Opt opt, Tree params, Tree grads) {
  auto own = std::make_shared<Owned<Tree>>(Owned<Tree>{std::move(params), std::move(grads)});
  Case c = optimizer_case(std::move(name), std::move(opt), own->params, own->grads);
  auto call = std::move(c.call);
  c.call = [own, call] { call(); };
  return c;
}

constexpr int kManifoldSizes[] = {64, 128, 256, 512, 1024, 2048, 4096};
constexpr int kManifoldRank = 16;

Eigen::MatrixXf random_matrix(Eigen::Index rows, Eigen::Index cols, unsigned seed) {
  const Eigen::ArrayXf a = random_array(rows * cols, seed);
  return Eigen::Map<const Eigen::MatrixXf>(a.data(), rows, cols);
}

Case make_case(const std::string& name, Data& d) {
  geomopt::CommonOptions one{}, two{};
  two.threads = 2;
  if (name == "roof_1t" || name == "roof_2t") {
    auto& a = d.arrays();
    const Eigen::Index n = a[0].size();
    Case c;
    c.name = name;
    c.entries = static_cast<double>(n);
    if (name == "roof_1t") {
      c.call = [&a, n] {
        roof43(a[0].data(), a[1].data(), a[2].data(), a[3].data(), n);
        benchmark::ClobberMemory();
      };
    } else {
      geomopt::detail::ThreadPool& pool = d.threads();
      const Eigen::Index half = (n / 2 + 63) / 64 * 64;
      auto f = std::make_shared<std::function<void(int)>>([&a, n, half](int m) {
        const Eigen::Index b = m == 0 ? 0 : half, len = m == 0 ? half : n - half;
        roof43(a[0].data() + b, a[1].data() + b, a[2].data() + b, a[3].data() + b, len);
      });
      c.call = [&pool, f] {
        pool.run(*f);
        benchmark::ClobberMemory();
      };
    }
    return c;
  }
  if (name == "roof32_1t") {
    auto& a = d.arrays();
    const Eigen::Index n = a[0].size();
    Case c;
    c.name = name;
    c.entries = static_cast<double>(n);
    c.call = [&a, n] {
      roof32(a[0].data(), a[1].data(), a[2].data(), n);
      benchmark::ClobberMemory();
    };
    return c;
  }
  if (name == "roof_l2") {
    auto a = std::make_shared<std::vector<Eigen::ArrayXf>>();
    for (unsigned s = 0; s < 4; ++s) a->push_back(random_array(16384, 20 + s));
    Case c;
    c.name = name;
    c.entries = 16384;
    c.call = [a] {
      auto& v = *a;
      roof43(v[0].data(), v[1].data(), v[2].data(), v[3].data(), 16384);
      benchmark::ClobberMemory();
    };
    return c;
  }
  if (name == "adam_l2") {
    FlatTree p{random_array(16384, 30).matrix()}, g{random_array(16384, 31).matrix()};
    return owned_case(name, geomopt::Adam({.lr = 1e-3}, one), std::move(p), std::move(g));
  }
  if (name == "adam_1t") return optimizer_case(name, geomopt::Adam({.lr = 1e-3}, one), d.p(), d.g());
  if (name == "adam_2t") return optimizer_case(name, geomopt::Adam({.lr = 1e-3}, two), d.p(), d.g());
  if (name == "adam_skip_1t" || name == "adam_raise_1t") {
    geomopt::CommonOptions checked = one;
    checked.non_finite = name == "adam_skip_1t" ? geomopt::NonFinitePolicy::skip : geomopt::NonFinitePolicy::raise;
    return optimizer_case(name, geomopt::Adam({.lr = 1e-3}, checked), d.p(), d.g());
  }
  if (name == "adamw_1t") return optimizer_case(name, geomopt::AdamW({.lr = 1e-3}, one), d.p(), d.g());
  if (name == "sgd_1t") return optimizer_case(name, geomopt::SGD({.lr = 1e-3, .momentum = 0.9}, one), d.p(), d.g());
  if (name == "adam_nosqrt_1t")
    return optimizer_case(name, geomopt::Optimizer<DiagAdamKernel<Variant::nosqrt>>({.lr = 1e-3}, one), d.p(), d.g());
  if (name == "adam_nosqrtdiv_1t")
    return optimizer_case(name, geomopt::Optimizer<DiagAdamKernel<Variant::nosqrtdiv>>({.lr = 1e-3}, one), d.p(),
                          d.g());
  if (name == "adam_fused_1t")
    return optimizer_case(name, geomopt::Optimizer<DiagAdamKernel<Variant::fused>>({.lr = 1e-3}, one), d.p(), d.g());

  // eu/N, rec/N, tra/N
  const auto slash = name.find('/');
  if (slash != std::string::npos) {
    const std::string kind = name.substr(0, slash);
    const int N = std::stoi(name.substr(slash + 1));
    const Eigen::MatrixXf g = random_matrix(N, kManifoldRank, 40);
    if (kind == "eu") {
      return owned_case(name, geomopt::Adam({.lr = 1e-3}, one), MatTree{random_matrix(N, kManifoldRank, 41)},
                        MatTree{g});
    }
    if (kind == "rec" || kind == "tra") {
      geomopt::CommonOptions co{};
      co.retraction = geomopt::Retraction::cayley;
      co.section = kind == "rec" ? geomopt::SectionPolicy::recomputed : geomopt::SectionPolicy::transported;
      geomopt::Rng rng(42);
      StiefelTree p{geomopt::Stiefel<float>::random_point(rng, N, kManifoldRank)};
      StiefelTree gt{geomopt::Stiefel<float>(g)};
      auto own = std::make_shared<Owned<StiefelTree>>(Owned<StiefelTree>{std::move(p), std::move(gt)});
      Case c = optimizer_case(name, geomopt::Adam({.lr = 1e-3}, co), own->params, own->grads);
      auto call = std::move(c.call);
      c.call = [own, call] { call(); };
      c.defect = [own] { return static_cast<double>(geomopt::check(own->params.w)); };
      c.entries = static_cast<double>(N) * kManifoldRank;
      return c;
    }
  }
  throw std::invalid_argument("optimizers_bench: unknown case " + name);
}

std::vector<std::string> expand(const std::string& list) {
  std::vector<std::string> tree = {"roof_1t", "roof_2t",  "adam_1t", "adam_2t", "roof32_1t",
                                   "sgd_1t",  "adamw_1t", "roof_l2", "adam_l2"};
  std::vector<std::string> diag = {"adam_nosqrt_1t", "adam_nosqrtdiv_1t", "adam_fused_1t"};
  std::vector<std::string> policy = {"adam_1t", "adam_skip_1t", "adam_raise_1t"};
  std::vector<std::string> manifold;
  for (const char* k : {"eu", "rec", "tra"})
    for (int N : kManifoldSizes) manifold.push_back(std::string(k) + "/" + std::to_string(N));
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "tree" || item == "all") out.insert(out.end(), tree.begin(), tree.end());
    if (item == "diag" || item == "all") out.insert(out.end(), diag.begin(), diag.end());
    if (item == "manifold" || item == "all") out.insert(out.end(), manifold.begin(), manifold.end());
    if (item == "policy") out.insert(out.end(), policy.begin(), policy.end());
    if (item != "tree" && item != "diag" && item != "manifold" && item != "all" && item != "policy" && !item.empty())
      out.push_back(item);
  }
  return out;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) {
  std::string cases = "all";
  int reps = 5, warmup = 2;
  double min_ms = 30;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* key) -> const char* {
      const std::string k = std::string("--") + key + "=";
      return a.rfind(k, 0) == 0 ? argv[i] + k.size() : nullptr;
    };
    if (const char* v = value("cases")) {
      cases = v;
    } else if (const char* v2 = value("reps")) {
      reps = std::atoi(v2);
    } else if (const char* v3 = value("warmup")) {
      warmup = std::atoi(v3);
    } else if (const char* v4 = value("min-ms")) {
      min_ms = std::atof(v4);
    } else {
      std::fprintf(stderr, "usage: %s [--cases=LIST|all|tree|manifold] [--reps=R] [--warmup=W] [--min-ms=M]\n",
                   argv[0]);
      return 2;
    }
  }

  Data data;
  std::vector<Case> all;
  for (const std::string& name : expand(cases)) all.push_back(make_case(name, data));

  // Warm-up: touches every page, and sets each case's calls per repetition so that a repetition lasts min_ms.
  for (Case& c : all) {
    for (int w = 0; w < warmup; ++w) c.call();
    const auto t0 = Clock::now();
    c.call();
    const double once = seconds_since(t0);
    c.inner = std::max<long>(1, static_cast<long>(min_ms * 1e-3 / std::max(once, 1e-9)));
    for (long k = 1; k < std::min<long>(c.inner, 3); ++k) c.call();
  }
  for (int r = 0; r < reps; ++r) {
    for (Case& c : all) {
      const auto t0 = Clock::now();
      for (long k = 0; k < c.inner; ++k) c.call();
      c.seconds.push_back(seconds_since(t0) / static_cast<double>(c.inner));
    }
  }

  std::printf("{\"reps\": %d, \"cases\": {", reps);
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Case& c = all[i];
    std::printf("%s\n  \"%s\": {\"entries\": %.0f, \"inner\": %ld, \"seconds\": [", i ? "," : "", c.name.c_str(),
                c.entries, c.inner);
    for (std::size_t k = 0; k < c.seconds.size(); ++k) std::printf("%s%.9g", k ? ", " : "", c.seconds[k]);
    std::printf("]");
    if (c.defect) std::printf(", \"defect\": %.3g", c.defect());
    std::printf("}");
  }
  std::printf("\n}}\n");
  return 0;
}
