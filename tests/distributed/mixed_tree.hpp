// The tree of the sharded optimizer's tests: a matrix and a vector large enough to be cut into pieces (at
// kPieces' 256 entries), a small vector, a Stiefel and a Sphere leaf; each rank's gradient at each step, the same on
// every rank that asks; the serial mean of P ranks' gradients (the averager's formula); a tree's bytes.
#pragma once

#include <Eigen/Core>
#include <geomopt/distributed/ownership.hpp>
#include <geomopt/manifolds/sphere/sphere.hpp>
#include <geomopt/manifolds/stiefel.hpp>
#include <geomopt/ptree.hpp>
#include <random>
#include <vector>

namespace dtest {

template <class T>
struct Mixed {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> weight;  // 40 x 31: 1240 entries, five pieces of 256
  Eigen::Matrix<T, Eigen::Dynamic, 1> bias;                 // 300: two pieces
  Eigen::Matrix<T, Eigen::Dynamic, 1> scale;                // 10: whole
  geomopt::Stiefel<T> frame;                                // 8 x 3
  geomopt::Sphere<T> direction;                             // 6
  GEOMOPT_PTREE(weight, bias, scale, frame, direction)
};

inline constexpr geomopt::distributed::OwnershipOptions kPieces{.max_piece_entries = 256};

// The same numbers at every call and on every rank (Eigen's Random draws from std::rand, whose state moves).
template <class T>
Mixed<T> make_params(Eigen::Index bias = 300) {
  geomopt::Rng rng(5);
  std::mt19937 entries(7);
  std::uniform_real_distribution<double> u(-1, 1);
  const auto draw = [&](Eigen::Index rows, Eigen::Index cols) {
    return Eigen::Matrix<T, -1, -1>::NullaryExpr(rows, cols, [&] { return static_cast<T>(u(entries)); }).eval();
  };
  Mixed<T> p{draw(40, 31), draw(bias, 1), draw(10, 1), geomopt::Stiefel<T>::random_point(rng, 8, 3),
             geomopt::Sphere<T>::random_point(rng, 6)};
  return p;
}

// Rank q's gradient at step k, the same on every rank that asks.
template <class T>
Mixed<T> gradient_of(const Mixed<T>& shape, int q, int k) {
  std::mt19937 rng(static_cast<unsigned>(1000 * k + q));
  std::normal_distribution<double> n(0, 1);
  Mixed<T> g = shape;
  geomopt::ptree::for_each_storage([&](auto& b) { b = b.unaryExpr([&](T) { return static_cast<T>(n(rng)); }); }, g);
  return g;
}

// The serial mean of every rank's gradient: left-to-right sum in rank order, one division by P.
template <class T>
Mixed<T> serial_mean(const Mixed<T>& shape, int P, int k) {
  Mixed<T> sum = gradient_of(shape, 0, k);
  for (int q = 1; q < P; ++q) {
    const Mixed<T> g = gradient_of(shape, q, k);
    geomopt::ptree::for_each_storage([](auto& s, const auto& x) { s += x; }, sum, g);
  }
  geomopt::ptree::for_each_storage([&](auto& s) { s /= static_cast<T>(P); }, sum);
  return sum;
}

template <class Tree>
std::vector<unsigned char> bytes_of(const Tree& t) {
  std::vector<unsigned char> out;
  geomopt::ptree::for_each_storage(
      [&](const auto& b) {
        const auto* p = reinterpret_cast<const unsigned char*>(b.data());
        out.insert(out.end(), p, p + b.size() * static_cast<Eigen::Index>(sizeof(*b.data())));
      },
      t);
  return out;
}

}  // namespace dtest
