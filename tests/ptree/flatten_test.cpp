// Flatten / unflatten / flatten_into / unflatten_into: order, layout and round trips over every branch kind.
#include "common.hpp"

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

using ptest::check_layout;
using ptest::check_vec_eq;
using ptest::seq;
using ptest::seq_fixed;

namespace {

// ---------------------------------------------------------------------------------------------------------------
// A small tree with hand-known values for checking the flatten order independently.
struct Order {
  Eigen::Matrix<double, 2, 3> w;              // w(r, c) = 10 r + c
  std::vector<Eigen::Vector2d> vs;            // (100, 101), (102, 103)
  std::map<std::string, double> m;            // "zeta" = 200, "alpha" = 201: key order puts alpha first
  std::optional<double> absent;               // nullopt: nothing
  std::optional<Eigen::Vector2d> present;     // (300, 301)
  std::variant<double, Eigen::Vector3d> var;  // Vector3d (400, 401, 402)
  std::tuple<double, Eigen::Array22d> tup;    // 500, a(r, c) = 600 + r + 2c
  pt::Buffer<Eigen::Vector2d> buf;            // never flattened
  Eigen::Matrix<double, 1, 3> row;            // a row vector: (800, 801, 802)
  double last;                                // 700
  GEOMOPT_PTREE(w, vs, m, absent, present, var, tup, buf, row, last)
};

Order make_order() {
  Order o;
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) o.w(r, c) = 10.0 * r + c;
  o.vs = {Eigen::Vector2d(100, 101), Eigen::Vector2d(102, 103)};
  o.m["zeta"] = 200;
  o.m["alpha"] = 201;
  o.absent = std::nullopt;
  o.present = Eigen::Vector2d(300, 301);
  o.var = Eigen::Vector3d(400, 401, 402);
  Eigen::Array22d a;
  a << 600, 602, 601, 603;
  o.tup = {500.0, a};
  o.buf = pt::Buffer<Eigen::Vector2d>{Eigen::Vector2d(-1, -2)};
  o.row << 800, 801, 802;
  o.last = 700;
  return o;
}

const Eigen::VectorXd& order_expected() {
  static const Eigen::VectorXd e = ptest::vec({0,   10,  1,   11,  2,   12,  // w column-major
                                               100, 101, 102, 103,           // vs.0, vs.1
                                               201, 200,                     // m.alpha, m.zeta
                                               300, 301,                     // present
                                               400, 401, 402,                // var
                                               500, 600, 601, 602, 603,      // tup.0, tup.1 column-major
                                               800, 801, 802,                // row
                                               700});                        // last
  return e;
}

// ---------------------------------------------------------------------------------------------------------------
// A nested tree using every branch kind, for round trips.
template <class T>
struct Net {
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  std::vector<Dense<T>> layers;
  std::array<Eigen::Matrix<T, 2, 1>, 2> anchors;
  std::tuple<T, Eigen::Matrix<T, 1, 3>> head;
  std::pair<Eigen::Array<T, 2, 2>, Eigen::Array<T, Eigen::Dynamic, 1>> arrs;
  std::optional<Vec> scale;
  std::map<std::string, Dense<T>> blocks;
  std::variant<Dense<T>, Eigen::Matrix<T, 3, 1>, T> enc;
  std::shared_ptr<Eigen::Matrix<T, 2, 2>> tie_a;
  std::shared_ptr<Eigen::Matrix<T, 2, 2>> tie_b;
  pt::Buffer<Vec> stats;
  T gain;
  GEOMOPT_PTREE(layers, anchors, head, arrs, scale, blocks, enc, tie_a, tie_b, stats, gain)
};

// Fresh, deterministic trees (no shared state between two calls).
template <class T>
Net<T> make_net(int alternative, bool with_scale) {
  using Vec = typename Net<T>::Vec;
  Net<T> n;
  n.layers = {make_dense<T>(3, 2, 1), make_dense<T>(1, 3, 20)};
  n.anchors = {seq_fixed<Eigen::Matrix<T, 2, 1>>(40), seq_fixed<Eigen::Matrix<T, 2, 1>>(42)};
  n.head = {T(44), seq_fixed<Eigen::Matrix<T, 1, 3>>(45)};
  n.arrs = {seq_fixed<Eigen::Array<T, 2, 2>>(48), seq<Eigen::Array<T, Eigen::Dynamic, 1>>(3, 52)};
  if (with_scale) n.scale = seq<Vec>(2, 55);
  n.blocks["enc"] = make_dense<T>(2, 2, 60);
  n.blocks["aux"] = make_dense<T>(1, 1, 70);
  if (alternative == 0) n.enc = make_dense<T>(1, 2, 80);
  if (alternative == 1) n.enc = seq_fixed<Eigen::Matrix<T, 3, 1>>(85);
  if (alternative == 2) n.enc = T(89);
  n.tie_a = std::make_shared<Eigen::Matrix<T, 2, 2>>(seq_fixed<Eigen::Matrix<T, 2, 2>>(90));
  n.tie_b = n.tie_a;
  n.stats = pt::Buffer<Vec>{seq<Vec>(2, -50)};
  n.gain = T(99);
  return n;
}

template <class A, class B>
void check_mat(const A& got, const B& proto, double a, double b) {
  REQUIRE(got.rows() == proto.rows());
  REQUIRE(got.cols() == proto.cols());
  for (Eigen::Index i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(static_cast<double>(got.reshaped()(i)) == doctest::Approx(a * static_cast<double>(proto.reshaped()(i)) + b));
  }
}
template <class A, class B>
void check_scalar(A got, B proto, double a, double b) {
  CHECK(static_cast<double>(got) == doctest::Approx(a * static_cast<double>(proto) + b));
}
template <class A, class B>
void check_dense(const Dense<A>& got, const Dense<B>& proto, double a, double b) {
  check_mat(got.weight, proto.weight, a, b);
  check_mat(got.bias, proto.bias, a, b);
}

// Checks every trainable leaf of got == a * proto + b (read directly, not through the library), buffers equal to
// the prototype's, and the tie preserved as a fresh object.
template <class A, class B>
void check_net(const Net<A>& got, const Net<B>& proto, double a, double b) {
  REQUIRE(got.layers.size() == proto.layers.size());
  for (std::size_t i = 0; i < got.layers.size(); ++i) check_dense(got.layers[i], proto.layers[i], a, b);
  check_mat(got.anchors[0], proto.anchors[0], a, b);
  check_mat(got.anchors[1], proto.anchors[1], a, b);
  check_scalar(std::get<0>(got.head), std::get<0>(proto.head), a, b);
  check_mat(std::get<1>(got.head), std::get<1>(proto.head), a, b);
  check_mat(got.arrs.first, proto.arrs.first, a, b);
  check_mat(got.arrs.second, proto.arrs.second, a, b);
  REQUIRE(got.scale.has_value() == proto.scale.has_value());
  if (got.scale) check_mat(*got.scale, *proto.scale, a, b);
  REQUIRE(got.blocks.size() == proto.blocks.size());
  for (const auto& [k, v] : proto.blocks) {
    REQUIRE(got.blocks.count(k) == 1);
    check_dense(got.blocks.at(k), v, a, b);
  }
  REQUIRE(got.enc.index() == proto.enc.index());
  if (proto.enc.index() == 0) check_dense(std::get<0>(got.enc), std::get<0>(proto.enc), a, b);
  if (proto.enc.index() == 1) check_mat(std::get<1>(got.enc), std::get<1>(proto.enc), a, b);
  if (proto.enc.index() == 2) check_scalar(std::get<2>(got.enc), std::get<2>(proto.enc), a, b);
  REQUIRE(got.tie_a);
  REQUIRE(got.tie_b);
  CHECK(static_cast<const void*>(got.tie_a.get()) == static_cast<const void*>(got.tie_b.get()));
  CHECK(static_cast<const void*>(got.tie_a.get()) != static_cast<const void*>(proto.tie_a.get()));
  check_mat(*got.tie_a, *proto.tie_a, a, b);
  check_mat(*got.stats, *proto.stats, 1, 0);  // buffers come from the prototype
  check_scalar(got.gain, proto.gain, a, b);
}

long long net_size(int alternative, bool with_scale) {
  long long n = (6 + 3) + (3 + 1)    // layers
                + 2 + 2              // anchors
                + 1 + 3              // head
                + 4 + 3              // arrs
                + (1 + 1) + (4 + 2)  // blocks aux, enc
                + 4                  // tie (once)
                + 1;                 // gain
  if (with_scale) n += 2;
  n += alternative == 0 ? 2 + 1 : alternative == 1 ? 3 : 1;
  return n;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
static_assert(std::is_same_v<pt::scalar_t<Net<double>>, double>);
static_assert(std::is_same_v<pt::scalar_t<Net<float>>, float>);
static_assert(std::is_same_v<pt::rebind_t<Net<double>, float>, Net<float>>);
static_assert(std::is_same_v<pt::rebind_t<Net<float>, double>, Net<double>>);
static_assert(std::is_same_v<pt::scalar_t<Order>, double>);

TEST_CASE("flatten order: walk order, column-major inside a leaf, key order of maps, buffers skipped") {
  const Order o = make_order();
  const auto v = pt::flatten(o);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(v)>, Eigen::VectorXd>);
  check_vec_eq(v, order_expected());
}

TEST_CASE("layout by hand: paths, offsets, sizes and dims") {
  const Order o = make_order();
  const pt::Layout l = pt::layout(o);
  check_layout(l,
               {{"w", 0, 6, {2, 3}},
                {"vs.0", 6, 2, {2}},
                {"vs.1", 8, 2, {2}},
                {"m.alpha", 10, 1, {}},
                {"m.zeta", 11, 1, {}},
                {"present", 12, 2, {2}},
                {"var", 14, 3, {3}},
                {"tup.0", 17, 1, {}},
                {"tup.1", 18, 4, {2, 2}},
                {"row", 22, 3, {1, 3}},
                {"last", 25, 1, {}}},
               26);
  CHECK(pt::layout(make_order()) == l);
  Order other = make_order();
  other.vs.pop_back();
  CHECK_FALSE(pt::layout(other) == l);
  CHECK(ptest::ll(pt::count(o)) == 26);
}

TEST_CASE("flatten_into writes the same order - unflatten_into reads it back") {
  Order o = make_order();
  Eigen::VectorXd v = Eigen::VectorXd::Constant(26, -7);
  pt::flatten_into(v, o);
  check_vec_eq(v, order_expected());

  Eigen::VectorXd w = order_expected() * 2.0;
  pt::unflatten_into(o, w);
  CHECK(o.w(1, 2) == 24.0);
  CHECK(o.w(0, 1) == 2.0);
  CHECK(o.vs[1][0] == 204.0);
  CHECK(o.m.at("alpha") == 402.0);
  CHECK(o.m.at("zeta") == 400.0);
  CHECK_FALSE(o.absent.has_value());
  CHECK((*o.present)[1] == 602.0);
  CHECK(std::get<1>(o.var)[2] == 804.0);
  CHECK(std::get<0>(o.tup) == 1000.0);
  CHECK(std::get<1>(o.tup)(0, 1) == 1204.0);
  CHECK(std::get<1>(o.tup)(1, 0) == 1202.0);
  CHECK(o.row(0, 2) == 1604.0);
  CHECK(o.last == 1400.0);
  CHECK((*o.buf)[0] == -1.0);  // buffers untouched
  CHECK((*o.buf)[1] == -2.0);
}

TEST_CASE("round trip on a nested tree with every branch kind, each variant alternative, optional present/absent") {
  for (int alt = 0; alt < 3; ++alt) {
    for (bool with_scale : {true, false}) {
      CAPTURE(alt);
      CAPTURE(with_scale);
      const Net<double> net = make_net<double>(alt, with_scale);
      const auto v = pt::flatten(net);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(v)>, Eigen::VectorXd>);
      CHECK(ptest::ll(v.size()) == net_size(alt, with_scale));
      CHECK(ptest::ll(pt::count(net)) == net_size(alt, with_scale));
      CHECK(ptest::ll(pt::layout(net).size()) == net_size(alt, with_scale));

      // unflatten of the flat vector gives the same tree.
      const auto same = pt::unflatten(net, v);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(same)>, Net<double>>);
      check_net(same, net, 1, 0);

      // unflatten of an affine image of the vector gives that affine image leaf by leaf.
      const Eigen::VectorXd w = (v.array() * 2.0 + 1.0).matrix();
      const auto image = pt::unflatten(net, w);
      check_net(image, net, 2, 1);
      check_vec_eq(pt::flatten(image), w);

      // no aliasing: changing the result leaves the prototype alone.
      auto image2 = pt::unflatten(net, v);
      image2.layers[0].weight(0, 0) = -1000;
      *image2.tie_a *= 3;
      check_vec_eq(pt::flatten(net), v);

      // flatten_into gives the same vector.
      Eigen::VectorXd into = Eigen::VectorXd::Zero(v.size());
      pt::flatten_into(into, net);
      check_vec_eq(into, v);

      // unflatten_into on a separate, fresh tree of the same shape.
      Net<double> target = make_net<double>(alt, with_scale);
      pt::unflatten_into(target, w);
      check_net(target, net, 2, 1);
      CHECK(target.tie_a.get() == target.tie_b.get());
    }
  }
}

TEST_CASE("round trip on a float tree: flatten gives VectorXf") {
  const Net<float> net = make_net<float>(0, true);
  const auto v = pt::flatten(net);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(v)>, Eigen::VectorXf>);
  CHECK(std::is_same_v<std::remove_cvref_t<decltype(v)>, Eigen::VectorXf>);
  CHECK(ptest::ll(v.size()) == net_size(0, true));
  const Eigen::VectorXf w = (v.array() * 2.0f + 1.0f).matrix();
  const auto back = pt::unflatten(net, w);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(back)>, Net<float>>);
  check_net(back, net, 2, 1);

  // flatten<double> of a float tree, and unflatten into double from a float prototype.
  const auto vd = pt::flatten<double>(net);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(vd)>, Eigen::VectorXd>);
  check_vec_eq(vd, v);
  const auto d = pt::unflatten(net, (vd.array() * 2.0 + 1.0).matrix().eval());
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(d)>, Net<double>>);
  check_net(d, net, 2, 1);
  CHECK(d.stats->size() == 2);
  CHECK((*d.stats)[1] == -49.0);  // the float buffer is cast along

  Net<float> target = make_net<float>(0, true);
  Eigen::VectorXf into(v.size());
  pt::flatten_into(into, target);
  check_vec_eq(into, v);
  pt::unflatten_into(target, w);
  check_net(target, net, 2, 1);
}

namespace {
template <class A, class B>
struct Mixed {
  Eigen::Matrix<A, Eigen::Dynamic, 1> f;
  Eigen::Matrix<B, 2, 2> d;
  A s;
  std::vector<Eigen::Array<B, Eigen::Dynamic, 1>> tail;
  GEOMOPT_PTREE(f, d, s, tail)
};

Mixed<float, double> make_mixed() {
  Mixed<float, double> m;
  m.f = seq<Eigen::VectorXf>(3, 1);
  m.d = seq_fixed<Eigen::Matrix2d>(4);
  m.s = 8.5f;
  m.tail = {seq<Eigen::ArrayXd>(2, 10)};
  return m;
}
}  // namespace

static_assert(std::is_same_v<pt::scalar_t<Mixed<float, double>>, double>);
static_assert(std::is_same_v<pt::scalar_t<Mixed<double, float>>, double>);
static_assert(std::is_same_v<pt::scalar_t<Mixed<float, float>>, float>);
static_assert(std::is_same_v<pt::rebind_t<Mixed<float, double>, double>, Mixed<double, double>>);
static_assert(std::is_same_v<pt::rebind_t<Mixed<float, double>, float>, Mixed<float, float>>);

TEST_CASE("mixed float + double tree: scalar_t is double, flatten gives VectorXd, flatten<float> gives VectorXf") {
  CHECK(std::is_same_v<pt::scalar_t<Mixed<float, double>>, double>);
  CHECK(std::is_same_v<pt::scalar_t<Mixed<float, float>>, float>);
  const auto m = make_mixed();
  const auto v = pt::flatten(m);
  CHECK(std::is_same_v<std::remove_cvref_t<decltype(v)>, Eigen::VectorXd>);
  const Eigen::VectorXd expected = ptest::vec({1, 2, 3, 4, 5, 6, 7, 8.5, 10, 11});
  check_vec_eq(v, expected);

  const auto vf = pt::flatten<float>(m);
  CHECK(std::is_same_v<std::remove_cvref_t<decltype(vf)>, Eigen::VectorXf>);
  check_vec_eq(vf, expected);

  const auto back = pt::unflatten(m, (expected * 2).eval());
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(back)>, Mixed<double, double>>);
  check_vec_eq(back.f, ptest::vec({2, 4, 6}));
  CHECK(back.d(1, 1) == 14.0);
  CHECK(back.s == 17.0);
  check_vec_eq(back.tail[0], ptest::vec({20, 22}));

  const auto backf = pt::unflatten(m, vf);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(backf)>, Mixed<float, float>>);
  check_vec_eq(pt::flatten(backf), expected);

  auto target = make_mixed();
  Eigen::VectorXd into(10);
  pt::flatten_into(into, target);
  check_vec_eq(into, expected);
  pt::unflatten_into(target, (expected * 3).eval());
  check_vec_eq(target.f, ptest::vec({3, 6, 9}));
  CHECK(target.d(0, 1) == 18.0);
  CHECK(target.s == 25.5f);
  check_vec_eq(target.tail[0], ptest::vec({30, 33}));
}

TEST_CASE("scalar leaves and a bare leaf as the whole tree") {
  // A double on its own is a tree with one leaf and the root path.
  double x = 3.5;
  const auto v = pt::flatten(x);
  check_vec_eq(v, ptest::vec({3.5}));
  const auto l = pt::layout(x);
  check_layout(l, {{"", 0, 1, {}}}, 1);
  double y = pt::unflatten(x, ptest::vec({-2}));
  CHECK(y == -2.0);
  pt::unflatten_into(x, ptest::vec({9}));
  CHECK(x == 9.0);

  Eigen::Matrix3f m = seq_fixed<Eigen::Matrix3f>(1);
  const auto vm = pt::flatten(m);
  CHECK(std::is_same_v<std::remove_cvref_t<decltype(vm)>, Eigen::VectorXf>);
  check_vec_eq(vm, ptest::vec({1, 2, 3, 4, 5, 6, 7, 8, 9}));
  const auto md = pt::unflatten(m, ptest::vec({9, 8, 7, 6, 5, 4, 3, 2, 1}));
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(md)>, Eigen::Matrix3d>);
  CHECK(md(0, 0) == 9.0);
  CHECK(md(1, 0) == 8.0);
  CHECK(md(0, 1) == 6.0);
  check_layout(pt::layout(m), {{"", 0, 9, {3, 3}}}, 9);

  std::vector<double> scalars = {1, 2, 3};
  check_vec_eq(pt::flatten(scalars), ptest::vec({1, 2, 3}));
  check_layout(pt::layout(scalars), {{"0", 0, 1, {}}, {"1", 1, 1, {}}, {"2", 2, 1, {}}}, 3);
}

TEST_CASE("fixed-size Eigen matrices and arrays round trip") {
  std::tuple<Eigen::Matrix<double, 2, 3>, Eigen::Array<double, 3, 2>, Eigen::Array4d, Eigen::Matrix<double, 1, 1>> t;
  std::get<0>(t) = seq_fixed<Eigen::Matrix<double, 2, 3>>(0);
  std::get<1>(t) = seq_fixed<Eigen::Array<double, 3, 2>>(6);
  std::get<2>(t) = seq_fixed<Eigen::Array4d>(12);
  std::get<3>(t)(0, 0) = 16;
  Eigen::VectorXd expected(17);
  for (int i = 0; i < 17; ++i) expected[i] = i;
  check_vec_eq(pt::flatten(t), expected);
  check_layout(pt::layout(t), {{"0", 0, 6, {2, 3}}, {"1", 6, 6, {3, 2}}, {"2", 12, 4, {4}}, {"3", 16, 1, {1}}},
               17);  // 1x1 is a column vector type
  auto u = pt::unflatten(t, (expected * -1).eval());
  CHECK(std::get<1>(u)(2, 1) == -11.0);
  CHECK(std::get<2>(u)(3) == -15.0);
  CHECK(std::get<3>(u)(0, 0) == -16.0);
  auto f = pt::unflatten(t, expected.cast<float>().eval());
  static_assert(std::is_same_v<std::tuple_element_t<1, decltype(f)>, Eigen::Array<float, 3, 2>>);
  CHECK(std::get<0>(f)(1, 2) == 5.0f);
}

TEST_CASE("empty containers and absent optionals flatten to nothing") {
  std::tuple<std::vector<Eigen::VectorXd>, std::optional<Eigen::VectorXd>, std::map<std::string, double>> t;
  CHECK(pt::flatten(t).size() == 0);
  CHECK(ptest::ll(pt::count(t)) == 0);
  CHECK(ptest::ll(pt::layout(t).size()) == 0);
  CHECK(pt::layout(t).leaves.empty());
  Eigen::VectorXd empty(0);
  pt::unflatten_into(t, empty);
  auto u = pt::unflatten(t, empty);
  CHECK(std::get<0>(u).empty());
  CHECK_FALSE(std::get<1>(u).has_value());
}
