// Ties (shared_ptr leaves reached from several paths) and buffers (non-trainable leaves).
#include "common.hpp"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

using ptest::check_layout;
using ptest::check_vec_eq;
using ptest::seq;

namespace {

template <class T>
struct Enc {
  std::shared_ptr<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>> weight;
  Eigen::Matrix<T, Eigen::Dynamic, 1> bias;
  GEOMOPT_PTREE(weight, bias)
};

template <class T>
struct AE {
  Enc<T> enc;
  Enc<T> dec;
  pt::Buffer<Eigen::Matrix<T, Eigen::Dynamic, 1>> stats;
  GEOMOPT_PTREE(enc, dec, stats)
};

template <class T>
AE<T> make_ae() {
  using M = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using V = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  AE<T> a;
  a.enc.weight = std::make_shared<M>(seq<M>(2, 3, 1));  // 1..6
  a.dec.weight = a.enc.weight;                          // tied
  a.enc.bias = seq<V>(2, 7);                            // 7, 8
  a.dec.bias = seq<V>(3, 9);                            // 9, 10, 11
  a.stats = pt::Buffer<V>{seq<V>(4, 100)};
  return a;
}

const void* addr(const void* p) { return p; }

}  // namespace

static_assert(std::is_same_v<pt::rebind_t<AE<double>, float>, AE<float>>);
static_assert(std::is_same_v<pt::scalar_t<AE<float>>, float>);

TEST_CASE("a tied leaf is seen once, at its first path") {
  auto a = make_ae<double>();
  int calls = 0;
  std::vector<std::string> paths;
  pt::for_each([&](auto&) { ++calls; }, a);
  CHECK(calls == 3);
  pt::for_each_with_path([&](const pt::Path& p, const auto&) { paths.push_back(std::string(p.str())); }, a);
  CHECK(paths == std::vector<std::string>{"enc.weight", "enc.bias", "dec.bias"});

  CHECK(ptest::ll(pt::count(a)) == 6 + 2 + 3);
  check_layout(pt::layout(a), {{"enc.weight", 0, 6, {2, 3}}, {"enc.bias", 6, 2, {2}}, {"dec.bias", 8, 3, {3}}}, 11);
  check_vec_eq(pt::flatten(a), ptest::vec({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));

  // A mutation through the walk is applied once, and seen from both paths.
  pt::for_each([](auto& x) { x.array() += 1; }, a);
  CHECK((*a.enc.weight)(0, 0) == 2.0);
  CHECK((*a.dec.weight)(0, 0) == 2.0);

  // Walking two tied trees together: still once.
  auto b = make_ae<double>();
  calls = 0;
  pt::for_each(
      [&](auto& x, const auto& y) {
        ++calls;
        x += y;
      },
      a, b);
  CHECK(calls == 3);
  CHECK((*a.dec.weight)(1, 2) == 7.0 + 6.0);
}

TEST_CASE("aliases lists each alias path with the path it repeats") {
  const auto a = make_ae<double>();
  const std::vector<std::pair<std::string, std::string>> expected = {{"dec.weight", "enc.weight"}};
  CHECK(pt::aliases(a) == expected);

  auto untied = make_ae<double>();
  untied.dec.weight = std::make_shared<Eigen::MatrixXd>(*untied.enc.weight);
  CHECK(pt::aliases(untied).empty());
  CHECK(ptest::ll(pt::count(untied)) == 6 + 2 + 6 + 3);
}

TEST_CASE("a tied subtree is seen once - three paths to one object") {
  std::map<std::string, std::shared_ptr<Dense<double>>> m;
  auto d = std::make_shared<Dense<double>>(make_dense<double>(2, 2, 0));
  m["a"] = d;
  m["b"] = std::make_shared<Dense<double>>(make_dense<double>(1, 1, 10));
  m["c"] = d;
  m["d"] = d;
  check_layout(pt::layout(m),
               {{"a.weight", 0, 4, {2, 2}}, {"a.bias", 4, 2, {2}}, {"b.weight", 6, 1, {1, 1}}, {"b.bias", 7, 1, {1}}},
               8);
  const std::vector<std::pair<std::string, std::string>> expected = {{"c", "a"}, {"d", "a"}};
  CHECK(pt::aliases(m) == expected);
  const auto z = pt::zeros_like(m);
  CHECK(z.at("a").get() == z.at("c").get());
  CHECK(z.at("a").get() == z.at("d").get());
  CHECK(z.at("a").get() != z.at("b").get());
  CHECK(z.at("a").get() != d.get());
}

TEST_CASE("zeros_like, unflatten and cast preserve the tie with a fresh object") {
  const auto a = make_ae<double>();

  const auto z = pt::zeros_like(a);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(z)>, AE<double>>);
  REQUIRE(z.enc.weight);
  CHECK(z.enc.weight.get() == z.dec.weight.get());
  CHECK(z.enc.weight.get() != a.enc.weight.get());
  CHECK(z.enc.weight->rows() == 2);
  CHECK(z.enc.weight->cols() == 3);
  CHECK(z.enc.weight->isZero(0));
  CHECK(z.dec.bias.size() == 3);
  CHECK(z.dec.bias.isZero(0));
  check_vec_eq(*z.stats, *a.stats);  // buffers are not selected: copied

  const Eigen::VectorXd v = ptest::vec({-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11});
  const auto u = pt::unflatten(a, v);
  REQUIRE(u.enc.weight);
  CHECK(u.enc.weight.get() == u.dec.weight.get());
  CHECK(u.enc.weight.get() != a.enc.weight.get());
  CHECK((*u.dec.weight)(1, 2) == -6.0);
  CHECK(u.dec.bias[2] == -11.0);
  CHECK((*a.enc.weight)(1, 2) == 6.0);

  const auto uf = pt::unflatten(a, v.cast<float>().eval());
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(uf)>, AE<float>>);
  CHECK(uf.enc.weight.get() == uf.dec.weight.get());

  const auto c = pt::cast<float>(a);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(c)>, AE<float>>);
  REQUIRE(c.enc.weight);
  CHECK(static_cast<const void*>(c.enc.weight.get()) == static_cast<const void*>(c.dec.weight.get()));
  CHECK(addr(c.enc.weight.get()) != addr(a.enc.weight.get()));
  CHECK((*c.dec.weight)(1, 0) == 2.0f);
  check_vec_eq(*c.stats, *a.stats);

  // unflatten_into writes through the tie once, both paths see it.
  auto target = make_ae<double>();
  pt::unflatten_into(target, v);
  CHECK((*target.dec.weight)(0, 0) == -1.0);
  CHECK(target.enc.weight.get() == target.dec.weight.get());
}

TEST_CASE("a null shared_ptr is absent: no leaves") {
  auto a = make_ae<double>();
  a.enc.weight.reset();
  a.dec.weight.reset();
  CHECK(ptest::ll(pt::count(a)) == 5);
  CHECK(pt::flatten(a).size() == 5);
}

namespace {
template <class T>
struct WithBuffers {
  Eigen::Matrix<T, Eigen::Dynamic, 1> w;
  pt::Buffer<Eigen::Matrix<T, Eigen::Dynamic, 1>> stats;
  pt::Buffer<Eigen::VectorXi> counts;
  pt::Buffer<T> step;
  T b;
  GEOMOPT_PTREE(w, stats, counts, step, b)
};

WithBuffers<float> make_wb() {
  WithBuffers<float> t;
  t.w = seq<Eigen::VectorXf>(3, 1);
  t.stats = pt::Buffer<Eigen::VectorXf>{seq<Eigen::VectorXf>(2, 10)};
  t.counts = pt::Buffer<Eigen::VectorXi>{Eigen::VectorXi::Constant(4, 7)};
  t.step = pt::Buffer<float>{0.5f};
  t.b = 5;
  return t;
}
}  // namespace

static_assert(std::is_same_v<pt::rebind_t<WithBuffers<float>, double>, WithBuffers<double>>);
static_assert(std::is_same_v<pt::rebind_t<pt::Buffer<Eigen::VectorXf>, double>, pt::Buffer<Eigen::VectorXd>>);
static_assert(std::is_same_v<pt::rebind_t<pt::Buffer<Eigen::VectorXi>, double>, pt::Buffer<Eigen::VectorXi>>);
static_assert(std::is_same_v<pt::scalar_t<pt::Buffer<Eigen::VectorXd>>, void>);
static_assert(std::is_same_v<pt::scalar_t<WithBuffers<float>>, float>);

TEST_CASE("Buffer construction and access") {
  const Eigen::VectorXd v = ptest::vec({1, 2, 3});
  pt::Buffer<Eigen::VectorXd> b{v};
  CHECK(b.value().size() == 3);
  CHECK((*b)[1] == 2.0);
  CHECK(b->size() == 3);
  b.value()[0] = 9;
  CHECK((*b)[0] == 9.0);
  (*b)[2] = 8;
  CHECK(b->coeff(2) == 8.0);
  CHECK(v[0] == 1.0);  // a copy
  const auto& cb = b;
  CHECK(cb.value()[2] == 8.0);
  CHECK(cb->size() == 3);
  CHECK((*cb)[0] == 9.0);
}

TEST_CASE("buffers: skipped by params walks, visited by buffers and all walks") {
  auto t = make_wb();
  std::vector<long long> sizes;
  pt::for_each([&](auto& x) { sizes.push_back(ptest::numel(x)); }, t);
  CHECK(sizes == std::vector<long long>{3, 1});
  sizes.clear();
  pt::for_each(
      pt::params, [&](auto& x) { sizes.push_back(ptest::numel(x)); }, t);
  CHECK(sizes == std::vector<long long>{3, 1});

  std::vector<std::string> paths;
  pt::for_each_with_path(
      pt::buffers, [&](const pt::Path& p, auto&) { paths.push_back(std::string(p.str())); }, t);
  CHECK(paths == std::vector<std::string>{"stats", "counts", "step"});
  paths.clear();
  pt::for_each_with_path(
      pt::all, [&](const pt::Path& p, auto&) { paths.push_back(std::string(p.str())); }, t);
  CHECK(paths == std::vector<std::string>{"w", "stats", "counts", "step", "b"});

  // A buffer walk hands the buffer's L itself.
  bool saw_int = false;
  pt::for_each(
      pt::buffers,
      [&](auto& x) {
        using X = std::remove_cvref_t<decltype(x)>;
        if constexpr (std::is_same_v<X, Eigen::VectorXi>) {
          saw_int = true;
          CHECK(&x == &t.counts.value());
        }
        if constexpr (std::is_same_v<X, float>) CHECK(&x == &t.step.value());
      },
      t);
  CHECK(saw_int);
  pt::for_each(
      pt::buffers,
      [](auto& x) {
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(x)>, Eigen::VectorXf>) x.array() += 1;
      },
      t);
  CHECK((*t.stats)[0] == 11.0f);
}

TEST_CASE("buffers: not in flatten, layout or count(tree) - count(all) and count(buffers) include them") {
  const auto t = make_wb();
  check_vec_eq(pt::flatten(t), ptest::vec({1, 2, 3, 5}));
  check_layout(pt::layout(t), {{"w", 0, 3, {3}}, {"b", 3, 1, {}}}, 4);
  CHECK(ptest::ll(pt::count(t)) == 4);
  CHECK(ptest::ll(pt::count(pt::params, t)) == 4);
  CHECK(ptest::ll(pt::count(pt::all, t)) == 4 + 2 + 4 + 1);
  CHECK(ptest::ll(pt::count(pt::buffers, t)) == 2 + 4 + 1);
  CHECK(ptest::ll(pt::nbytes(t)) == 4 * 4);
  CHECK(ptest::ll(pt::nbytes(pt::all, t)) == 4 * 4 + 2 * 4 + 4 * 4 + 4);

  // unflatten takes buffers from the prototype.
  const auto u = pt::unflatten(t, ptest::vec({-1, -2, -3, -4}));
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(u)>, WithBuffers<double>>);
  CHECK(u.b == -4.0);
  check_vec_eq(*u.stats, ptest::vec({10, 11}));
  CHECK((*u.counts)[3] == 7);
  CHECK(*u.step == 0.5);
}

TEST_CASE("cast converts float buffers (integers stay)") {
  const auto t = make_wb();
  const auto d = pt::cast<double>(t);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(d)>, WithBuffers<double>>);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(*d.stats)>, Eigen::VectorXd>);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(*d.counts)>, Eigen::VectorXi>);
  check_vec_eq(*d.stats, ptest::vec({10, 11}));
  check_vec_eq(d.w, ptest::vec({1, 2, 3}));
  CHECK(*d.step == 0.5);
  CHECK((*d.counts)[0] == 7);
  CHECK(d.b == 5.0);
  // back to float, values preserved
  const auto f = pt::cast<float>(d);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(f)>, WithBuffers<float>>);
  check_vec_eq(*f.stats, ptest::vec({10, 11}));
}
