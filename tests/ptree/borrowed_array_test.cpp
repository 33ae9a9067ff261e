// BorrowedArray: a Euclidean leaf over memory it does not own (a tensor's storage): walked, flattened and rebuilt as
// a leaf; a copy and a rebuilt leaf own their numbers; assignment writes into the borrowed memory or refuses; lend
// moves it to other memory. Expected values are written out from the buffers' row-major numbers.
#include "common.hpp"

#include <geomopt/ptree/borrowed_array.hpp>

#include <vector>

namespace {

template <class T>
struct Lent {
  pt::BorrowedArray<T> w;
  Eigen::Matrix<T, Eigen::Dynamic, 1> b;
  GEOMOPT_PTREE(w, b)
};

}  // namespace

TEST_CASE("BorrowedArray: a leaf over the caller's row-major buffer, copied into owned numbers") {
  std::vector<float> buffer = {1, 2, 3, 4, 5, 6};  // 2 x 3, row-major
  Lent<float> t{pt::BorrowedArray<float>(buffer.data(), 2, 3), Eigen::VectorXf::Constant(2, 9)};
  CHECK(t.w.borrows());
  CHECK(t.w.value()(0, 2) == 3);
  CHECK(t.w.value()(1, 0) == 4);
  CHECK(pt::count(t) == 8);

  // The walk writes the caller's memory.
  pt::for_each_storage([](auto& block) { block.array() += 10; }, t);
  CHECK(buffer == std::vector<float>{11, 12, 13, 14, 15, 16});
  CHECK(t.b == Eigen::VectorXf::Constant(2, 19));

  // flatten reads column-major inside a leaf, as for every leaf (docs/ptree.md), whatever the storage order: the
  // row-major buffer's numbers come out by columns.
  const Eigen::VectorXf flat = pt::flatten(t);
  CHECK(flat.head(6) == (Eigen::VectorXf(6) << 11, 14, 12, 15, 13, 16).finished());
  Lent<float> copy = t;
  CHECK_FALSE(copy.w.borrows());
  copy.w.value().setZero();
  CHECK(buffer[0] == 11);
  auto doubled = pt::cast<double>(t);
  static_assert(std::is_same_v<decltype(doubled), Lent<double>>);
  CHECK_FALSE(doubled.w.borrows());
  CHECK(doubled.w.value()(1, 2) == 16.0);

  // Assigning to a borrowing leaf writes into the buffer; a wrong shape throws and writes nothing.
  copy.w.value().setConstant(7);
  t.w = copy.w;
  CHECK(buffer == std::vector<float>(6, 7));
  pt::BorrowedArray<float> wrong(pt::BorrowedArray<float>::Value::Zero(3, 2));
  CHECK_THROWS_WITH_AS(t.w = wrong, "BorrowedArray: cannot write a 3x2 value into borrowed memory of shape 2x3",
                       std::invalid_argument);
  CHECK(buffer == std::vector<float>(6, 7));

  // lend points it elsewhere, writing nothing; null data, whatever the shape, leaves it empty, holding no number.
  std::vector<float> other = {0, 1, 2, 3};
  t.w.lend(other.data(), 4, 1);
  CHECK(t.w.value().data() == other.data());
  CHECK(buffer == std::vector<float>(6, 7));
  t.w.lend(nullptr, 2, 3);
  CHECK(t.w.value().size() == 0);
  CHECK_FALSE(t.w.borrows());
  CHECK(pt::count(t) == 2);
}

TEST_CASE("BorrowedArray<T, 1>: the vector form, one column over the caller's numbers") {
  std::vector<double> buffer = {1, 2, 3};
  pt::BorrowedArray<double, 1> v(buffer.data(), 3, 1);
  static_assert(decltype(v)::Map::ColsAtCompileTime == 1);
  CHECK(v.borrows());
  CHECK(pt::count(v) == 3);
  pt::for_each_storage([](auto& block) { block.array() *= 2; }, v);
  CHECK(buffer == std::vector<double>{2, 4, 6});
  auto copy = v;
  CHECK_FALSE(copy.borrows());
  CHECK(copy.value() == Eigen::Vector3d(2, 4, 6));
  v.lend(nullptr, 3, 1);  // empty: a missing gradient
  CHECK(v.value().size() == 0);
  CHECK_FALSE(v.borrows());
}
