// unflatten into ceres::Jet and a derivative through it, checked against a central finite difference.
#include "common.hpp"

#include <ceres/jet.h>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

template <class T>
struct Model {
  std::vector<Dense<T>> layers;     // 2x2 (+2), 1x2 (+1)
  std::map<std::string, T> coeffs;  // "gain", "shift"
  std::optional<Eigen::Matrix<T, 2, 1>> skip;
  pt::Buffer<Eigen::Matrix<T, Eigen::Dynamic, 1>> input;  // data, not a parameter
  GEOMOPT_PTREE(layers, coeffs, skip, input)
};

constexpr int kParams = (4 + 2) + (2 + 1) + 2 + 2;  // 13

Model<double> make_model() {
  Model<double> m;
  Dense<double> l0;
  l0.weight.resize(2, 2);
  l0.weight << 0.3, -0.7, 0.5, 0.2;
  l0.bias = ptest::vec({0.1, -0.4});
  Dense<double> l1;
  l1.weight.resize(1, 2);
  l1.weight << 1.3, -0.6;
  l1.bias = ptest::vec({0.25});
  m.layers = {l0, l1};
  m.coeffs["gain"] = 0.8;
  m.coeffs["shift"] = -0.3;
  m.skip = Eigen::Vector2d(0.4, -1.1);
  m.input = pt::Buffer<Eigen::VectorXd>{ptest::vec({0.9, -1.7})};
  return m;
}

// A nonlinear scalar cost on the tree, written once for any scalar.
template <class T>
T cost(const Model<T>& m) {
  using std::sin;
  using std::tanh;
  const Eigen::Matrix<T, Eigen::Dynamic, 1>& x = *m.input;
  const auto& l0 = m.layers[0];
  const auto& l1 = m.layers[1];
  Eigen::Matrix<T, Eigen::Dynamic, 1> h(2);
  for (int r = 0; r < 2; ++r) {
    T z = l0.bias[r];
    for (int c = 0; c < 2; ++c) z += l0.weight(r, c) * x[c];
    h[r] = tanh(z) + (*m.skip)[r] * x[r];
  }
  T y = l1.bias[0];
  for (int c = 0; c < 2; ++c) y += l1.weight(0, c) * h[c];
  const T gain = m.coeffs.at("gain");
  const T shift = m.coeffs.at("shift");
  return gain * (y - shift) * (y - shift) + sin(gain * shift) + h.squaredNorm();
}

}  // namespace

TEST_CASE("unflatten into Jet: derivative of a cost matches a central finite difference") {
  using J = ceres::Jet<double, kParams>;
  static_assert(std::is_same_v<pt::rebind_t<Model<double>, J>, Model<J>>);
  static_assert(std::is_same_v<pt::scalar_t<Model<J>>, J>);
  static_assert(std::is_same_v<pt::scalar_t<std::tuple<J, double>>, J>);

  const Model<double> proto = make_model();
  const Eigen::VectorXd x = pt::flatten(proto);
  REQUIRE(x.size() == kParams);

  Eigen::Matrix<J, Eigen::Dynamic, 1> xj(kParams);
  for (int i = 0; i < kParams; ++i) xj[i] = J(x[i], i);
  const auto mj = pt::unflatten(proto, xj);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(mj)>, Model<J>>);

  // The Jet tree has the prototype's shape and data, the buffer cast along.
  REQUIRE(mj.layers.size() == 2);
  CHECK(mj.layers[0].weight(0, 1).a == -0.7);
  CHECK(mj.layers[0].weight(0, 1).v[2] == 1.0);  // column-major: (0,1) is entry 2
  CHECK(mj.coeffs.at("shift").v[10] == 1.0);     // gain is 9, shift 10 (key order)
  CHECK((*mj.input)[1].a == -1.7);
  CHECK((*mj.input)[1].v.isZero(0));

  const J c = cost(mj);
  CHECK(c.a == doctest::Approx(cost(proto)).epsilon(1e-14));

  const double h = 1e-5;
  for (int i = 0; i < kParams; ++i) {
    CAPTURE(i);
    Eigen::VectorXd xp = x, xm = x;
    xp[i] += h;
    xm[i] -= h;
    const double fd = (cost(pt::unflatten(proto, xp)) - cost(pt::unflatten(proto, xm))) / (2 * h);
    CHECK(std::abs(c.v[i] - fd) <= 1e-6 * std::max(1.0, std::abs(fd)));
  }

  // The gradient is not trivially zero (the check above could not pass by accident).
  CHECK(c.v.norm() > 0.1);
}

TEST_CASE("unflatten_into a Jet tree and flatten it back") {
  using J = ceres::Jet<double, 3>;
  Dense<J> d;
  d.weight.resize(1, 2);
  d.bias.resize(1);
  Eigen::Matrix<J, Eigen::Dynamic, 1> v(3);
  for (int i = 0; i < 3; ++i) v[i] = J(i + 1.0, i);
  pt::unflatten_into(d, v);
  CHECK(d.weight(0, 1).a == 2.0);
  CHECK(d.weight(0, 1).v[1] == 1.0);
  CHECK(d.bias[0].v[2] == 1.0);
  const auto back = pt::flatten(d);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(back)>, Eigen::Matrix<J, Eigen::Dynamic, 1>>);
  for (int i = 0; i < 3; ++i) {
    CHECK(back[i].a == v[i].a);
    CHECK(back[i].v == v[i].v);
  }
}
