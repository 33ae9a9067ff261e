// Shared helpers for the ptree tests. Written against docs/ptree.md, independently of the implementation:
// nothing here calls into geomopt to build expected values.
#pragma once

#include <doctest/doctest.h>

#include <geomopt/ptree.hpp>

#include "../support/exception_message.hpp"

#include <Eigen/Dense>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace pt = geomopt::ptree;

namespace ptest {

template <class X>
inline constexpr bool is_eigen_v = std::is_base_of_v<Eigen::EigenBase<std::remove_cvref_t<X>>, std::remove_cvref_t<X>>;

// A Layout path may be a std::string or a Path; both give the dotted string.
template <class P>
std::string path_str(const P& p) {
  if constexpr (std::is_convertible_v<const P&, std::string>) {
    return std::string(p);
  } else {
    return std::string(p.str());
  }
}

template <class D>
std::vector<long long> dims_vec(const D& d) {
  std::vector<long long> r;
  for (auto x : d) r.push_back(static_cast<long long>(x));
  return r;
}

template <class N>
long long ll(N n) {
  return static_cast<long long>(n);
}

inline std::string join(const std::vector<long long>& v) {
  std::string s = "{";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i != 0) s += ',';  // (not `(i ? "," : "") + ...`: g++ 12 -O3 reports a false -Wrestrict on that)
    s += std::to_string(v[i]);
  }
  return s + "}";
}

struct ExpectedLeaf {
  std::string path;
  long long offset;
  long long size;
  std::vector<long long> dims;
};

template <class Layout>
void check_layout(const Layout& l, const std::vector<ExpectedLeaf>& expected, long long total) {
  CHECK(ll(l.size()) == total);
  REQUIRE(ll(l.leaves.size()) == ll(expected.size()));
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CAPTURE(i);
    CHECK(path_str(l.leaves[i].path) == expected[i].path);
    CHECK(ll(l.leaves[i].offset) == expected[i].offset);
    CHECK(ll(l.leaves[i].size) == expected[i].size);
    CHECK(join(dims_vec(l.leaves[i].dims)) == join(expected[i].dims));
  }
}

// Element-wise exact comparison of two vectors (any scalar), with the index in the failure message.
template <class A, class B>
void check_vec_eq(const A& got, const B& expected) {
  REQUIRE(ll(got.size()) == ll(expected.size()));
  for (Eigen::Index i = 0; i < static_cast<Eigen::Index>(got.size()); ++i) {
    CAPTURE(i);
    CHECK(static_cast<double>(got[i]) == static_cast<double>(expected[i]));
  }
}

template <class A, class B>
bool same_values(const A& a, const B& b) {
  if (a.size() != b.size()) return false;
  for (Eigen::Index i = 0; i < a.size(); ++i)
    if (static_cast<double>(a[i]) != static_cast<double>(b[i])) return false;
  return true;
}

inline Eigen::VectorXd vec(std::initializer_list<double> xs) {
  Eigen::VectorXd v(static_cast<Eigen::Index>(xs.size()));
  Eigen::Index i = 0;
  for (double x : xs) v[i++] = x;
  return v;
}

inline void check_lines(const std::vector<std::string>& got, const std::vector<std::string>& expected) {
  for (std::size_t i = 0; i < got.size() && i < expected.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == expected[i]);
  }
  CHECK(got.size() == expected.size());
  if (got.size() != expected.size()) {
    std::string all;
    for (const auto& s : got) all += s + "\n";
    MESSAGE("visits were:\n" << all);
  }
}

// A matrix whose entry (r, c) is start + r + rows * c: its column-major order is start, start + 1, ...
template <class M>
M seq(Eigen::Index rows, Eigen::Index cols, double start) {
  M m;
  m.resize(rows, cols);
  for (Eigen::Index c = 0; c < cols; ++c)
    for (Eigen::Index r = 0; r < rows; ++r)
      m(r, c) = static_cast<typename M::Scalar>(start + static_cast<double>(r + rows * c));
  return m;
}
template <class M>
M seq(Eigen::Index n, double start) {
  return seq<M>(n, 1, start);
}
template <class M>
M seq_fixed(double start) {
  return seq<M>(M::RowsAtCompileTime, M::ColsAtCompileTime, start);
}

// Generic leaf helpers for walks (Eigen objects and arithmetic scalars).
template <class X>
double total(const X& x) {
  if constexpr (is_eigen_v<X>) {
    return static_cast<double>(x.sum());
  } else {
    return static_cast<double>(x);
  }
}

template <class X>
void poke(X& x) {
  if constexpr (is_eigen_v<X>) {
    x.array() += 1;
  } else {
    x += 1;
  }
}

template <class X>
X bumped(const X& x) {
  X y = x;
  poke(y);
  return y;
}

template <class D, class S>
void assign_cast(D& d, const S& s) {
  if constexpr (is_eigen_v<D>) {
    d = s.template cast<typename D::Scalar>();
  } else {
    d = static_cast<D>(s);
  }
}

template <class X>
long long numel(const X& x) {
  if constexpr (is_eigen_v<X>) {
    return static_cast<long long>(x.size());
  } else {
    return 1;
  }
}

// Runs f, returns what() of the StructureError it throws (or a marker when it throws nothing / something else).
template <class F>
std::string error_of(F&& f) {
  try {
    return test_support::message_of<geomopt::StructureError>(std::forward<F>(f)).value_or("<no exception>");
  } catch (const std::exception& e) {
    return std::string("<other exception: ") + e.what() + ">";
  }
}

}  // namespace ptest

// The canonical example of the docs.
template <class T>
struct Dense {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> weight;
  Eigen::Matrix<T, Eigen::Dynamic, 1> bias;
  GEOMOPT_PTREE(weight, bias)
};

template <class T>
Dense<T> make_dense(Eigen::Index out, Eigen::Index in, double start) {
  Dense<T> d;
  d.weight = ptest::seq<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>>(out, in, start);
  d.bias = ptest::seq<Eigen::Matrix<T, Eigen::Dynamic, 1>>(out, start + static_cast<double>(out * in));
  return d;
}
