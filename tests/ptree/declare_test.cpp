// Declaring trees: GEOMOPT_PTREE, a hand-written ptree_walk / ptree_children with other child names,
// GEOMOPT_PTREE_EXTERNAL for a type in another namespace.
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
using ptest::check_lines;
using ptest::check_vec_eq;
using ptest::seq;

namespace {

std::vector<std::string> paths_of(const auto& tree) {
  std::vector<std::string> r;
  pt::for_each_with_path([&](const pt::Path& p, const auto&) { r.push_back(std::string(p.str())); }, tree);
  return r;
}

// Hand-written: the children are named "kernel" and "offset", and visited in the other order than declared.
template <class T>
struct Renamed {
  Eigen::Matrix<T, Eigen::Dynamic, 1> b_;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> w_;

  template <class Visit, class... Self>
  static void ptree_walk(Visit&& visit, Self&&... self) {
    visit("kernel", self.w_...);
    visit("offset", self.b_...);
  }
  using ptree_children = geomopt::ptree::children<decltype(w_), decltype(b_)>;
};

// A class with private members declares its tree inside.
class Private {
 public:
  Private() : a_(Eigen::Vector2d(1, 2)), s_(3) {}
  double s() const { return s_; }

 private:
  Eigen::Vector2d a_;
  double s_;

 public:
  GEOMOPT_PTREE(a_, s_)
};

// Nested declared structs.
template <class T>
struct Outer {
  Dense<T> first;
  Renamed<T> second;
  GEOMOPT_PTREE(first, second)
};

}  // namespace

namespace thirdparty {
// A type we "cannot edit": no macro inside.
struct Pose {
  Eigen::Vector3d position;
  double angle = 0;
  Eigen::Matrix2d frame;
};
}  // namespace thirdparty

GEOMOPT_PTREE_EXTERNAL(thirdparty::Pose, position, angle, frame)

namespace thirdparty {
template <class T>
struct Box {
  Eigen::Matrix<T, 2, 1> lo;
  Eigen::Matrix<T, 2, 1> hi;
};
}  // namespace thirdparty

// A class template from elsewhere: geomopt::ptree::external specialised by hand (partially), as the docs say.
template <class T>
struct geomopt::ptree::external<thirdparty::Box<T>> {
  template <class Visit, class... Self>
  static void ptree_walk(Visit&& visit, Self&&... self) {
    visit("lo", self.lo...);
    visit("hi", self.hi...);
  }
  using ptree_children = geomopt::ptree::children<Eigen::Matrix<T, 2, 1>, Eigen::Matrix<T, 2, 1>>;
};

namespace {
struct Robot {
  std::vector<thirdparty::Pose> poses;
  double mass;
  GEOMOPT_PTREE(poses, mass)
};

thirdparty::Pose make_pose(double start) {
  thirdparty::Pose p;
  p.position = ptest::seq_fixed<Eigen::Vector3d>(start);
  p.angle = start + 3;
  p.frame = ptest::seq_fixed<Eigen::Matrix2d>(start + 4);
  return p;
}
}  // namespace

static_assert(std::is_same_v<pt::scalar_t<Dense<float>>, float>);
static_assert(std::is_same_v<pt::scalar_t<Dense<double>>, double>);
static_assert(std::is_same_v<pt::rebind_t<Dense<double>, float>, Dense<float>>);
static_assert(std::is_same_v<pt::scalar_t<Renamed<float>>, float>);
static_assert(std::is_same_v<pt::rebind_t<Renamed<float>, double>, Renamed<double>>);
static_assert(std::is_same_v<pt::scalar_t<Outer<float>>, float>);
static_assert(std::is_same_v<pt::rebind_t<Outer<double>, float>, Outer<float>>);
static_assert(std::is_same_v<pt::scalar_t<thirdparty::Pose>, double>);
static_assert(std::is_same_v<pt::scalar_t<Robot>, double>);
static_assert(std::is_same_v<pt::scalar_t<std::vector<Eigen::ArrayXXf>>, float>);
static_assert(std::is_same_v<pt::scalar_t<std::pair<float, Eigen::Vector2d>>, double>);
static_assert(std::is_same_v<pt::scalar_t<std::tuple<pt::Buffer<Eigen::VectorXd>>>, void>);
static_assert(std::is_same_v<pt::scalar_t<std::tuple<pt::Buffer<Eigen::VectorXd>, float>>, float>);
static_assert(std::is_same_v<pt::rebind_t<Eigen::MatrixXd, float>, Eigen::MatrixXf>);
static_assert(std::is_same_v<pt::rebind_t<Eigen::Array<double, 3, 2>, float>, Eigen::Array<float, 3, 2>>);
static_assert(std::is_same_v<pt::rebind_t<std::vector<Dense<double>>, float>, std::vector<Dense<float>>>);
static_assert(std::is_same_v<pt::rebind_t<std::map<std::string, double>, float>, std::map<std::string, float>>);
static_assert(std::is_same_v<pt::rebind_t<std::optional<Eigen::VectorXd>, float>, std::optional<Eigen::VectorXf>>);
static_assert(
    std::is_same_v<pt::rebind_t<std::variant<double, Eigen::Vector3d>, float>, std::variant<float, Eigen::Vector3f>>);
static_assert(std::is_same_v<pt::rebind_t<std::shared_ptr<Eigen::Matrix2d>, float>, std::shared_ptr<Eigen::Matrix2f>>);
static_assert(std::is_same_v<pt::rebind_t<std::array<double, 3>, float>, std::array<float, 3>>);
static_assert(
    std::is_same_v<pt::rebind_t<std::pair<double, Eigen::Vector2d>, float>, std::pair<float, Eigen::Vector2f>>);
static_assert(std::is_same_v<pt::rebind_t<Robot, double>, Robot>);
static_assert(std::is_same_v<pt::scalar_t<thirdparty::Box<float>>, float>);
static_assert(std::is_same_v<pt::rebind_t<thirdparty::Box<float>, double>, thirdparty::Box<double>>);

namespace {
struct Undeclared {  // no GEOMOPT_PTREE
  Eigen::VectorXd w;
};
struct HoldsUndeclared {
  Eigen::VectorXd w;
  std::vector<Undeclared> inner;
  GEOMOPT_PTREE(w, inner)
};
struct IntegerLeaf {
  Eigen::VectorXd w;
  int steps = 0;
  GEOMOPT_PTREE(w, steps)
};
struct IntegerBuffer {
  Eigen::VectorXd w;
  pt::Buffer<int> steps;
  GEOMOPT_PTREE(w, steps)
};
}  // namespace

// ptree::tree, which the entry points test before they compile anything on a type (docs/ptree.md, "Pitfalls"; the
// compile-fail programs check the message a type that fails it gets).
static_assert(pt::tree<Dense<double>>);
static_assert(pt::tree<std::vector<std::map<std::string, std::optional<Dense<float>>>>>);
static_assert(pt::tree<std::tuple<double, std::shared_ptr<Eigen::Matrix3f>, std::variant<float, Dense<double>>>>);
static_assert(pt::tree<IntegerBuffer>);
static_assert(pt::tree<const Dense<double>&>);
static_assert(!pt::tree<Undeclared>);
static_assert(!pt::tree<HoldsUndeclared>);
static_assert(!pt::tree<std::pair<double, Undeclared>>);
static_assert(!pt::tree<IntegerLeaf>);
static_assert(!pt::tree<Eigen::VectorXi>);
static_assert(std::is_same_v<pt::detail::culprit<HoldsUndeclared>::type, Undeclared>);
static_assert(std::is_same_v<pt::detail::culprit<IntegerLeaf>::type, int>);

TEST_CASE("GEOMOPT_PTREE: children in declaration order, named after the members") {
  const auto d = make_dense<double>(2, 3, 1);
  CHECK(paths_of(d) == std::vector<std::string>{"weight", "bias"});
  check_layout(pt::layout(d), {{"weight", 0, 6, {2, 3}}, {"bias", 6, 2, {2}}}, 8);
  check_vec_eq(pt::flatten(d), ptest::vec({1, 2, 3, 4, 5, 6, 7, 8}));
  CHECK(ptest::ll(pt::count(d)) == 8);

  Private p;
  CHECK(paths_of(p) == std::vector<std::string>{"a_", "s_"});
  check_vec_eq(pt::flatten(p), ptest::vec({1, 2, 3}));
  pt::unflatten_into(p, ptest::vec({4, 5, 6}));
  CHECK(p.s() == 6.0);
}

TEST_CASE("hand-written ptree_walk and ptree_children give other child names and order") {
  Renamed<double> r;
  r.b_ = ptest::vec({7, 8});
  r.w_ = seq<Eigen::MatrixXd>(1, 3, 1);
  CHECK(paths_of(r) == std::vector<std::string>{"kernel", "offset"});
  check_layout(pt::layout(r), {{"kernel", 0, 3, {1, 3}}, {"offset", 3, 2, {2}}}, 5);
  check_vec_eq(pt::flatten(r), ptest::vec({1, 2, 3, 7, 8}));
  const auto f = pt::unflatten(r, Eigen::VectorXf::LinSpaced(5, 10, 14).eval());
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(f)>, Renamed<float>>);
  CHECK(f.w_(0, 2) == 12.0f);
  CHECK(f.b_[1] == 14.0f);

  // Walked together with another instance, and nested.
  Outer<double> o{make_dense<double>(1, 1, 0), r};
  CHECK(paths_of(o) == std::vector<std::string>{"first.weight", "first.bias", "second.kernel", "second.offset"});
  const Outer<float> of = pt::cast<float>(o);
  int calls = 0;
  pt::for_each(
      [&](const auto& a, const auto& b) {
        ++calls;
        CHECK(ptest::total(a) == doctest::Approx(ptest::total(b)));
      },
      o, of);
  CHECK(calls == 4);
  check_lines(pt::visits(o),
              {"first.weight: leaf 1x1", "first.bias: leaf 1", "second.kernel: leaf 1x3", "second.offset: leaf 2"});
}

TEST_CASE("GEOMOPT_PTREE_EXTERNAL declares a type from another namespace non-intrusively") {
  const auto p = make_pose(1);
  CHECK(paths_of(p) == std::vector<std::string>{"position", "angle", "frame"});
  check_vec_eq(pt::flatten(p), ptest::vec({1, 2, 3, 4, 5, 6, 7, 8}));

  Robot r{{make_pose(1), make_pose(11)}, 99};
  CHECK(paths_of(r) == std::vector<std::string>{"poses.0.position", "poses.0.angle", "poses.0.frame",
                                                "poses.1.position", "poses.1.angle", "poses.1.frame", "mass"});
  check_layout(pt::layout(r),
               {{"poses.0.position", 0, 3, {3}},
                {"poses.0.angle", 3, 1, {}},
                {"poses.0.frame", 4, 4, {2, 2}},
                {"poses.1.position", 8, 3, {3}},
                {"poses.1.angle", 11, 1, {}},
                {"poses.1.frame", 12, 4, {2, 2}},
                {"mass", 16, 1, {}}},
               17);
  Eigen::VectorXd v = pt::flatten(r);
  v *= -1;
  const auto u = pt::unflatten(r, v);
  CHECK(u.poses[1].angle == -14.0);
  CHECK(u.poses[1].frame(1, 1) == -18.0);
  CHECK(u.mass == -99.0);
  pt::unflatten_into(r, v);
  CHECK(r.poses[0].position[2] == -3.0);
}

TEST_CASE("external specialised by hand for a class template") {
  std::vector<thirdparty::Box<float>> boxes(2);
  boxes[0].lo = Eigen::Vector2f(1, 2);
  boxes[0].hi = Eigen::Vector2f(3, 4);
  boxes[1].lo = Eigen::Vector2f(5, 6);
  boxes[1].hi = Eigen::Vector2f(7, 8);
  CHECK(paths_of(boxes) == std::vector<std::string>{"0.lo", "0.hi", "1.lo", "1.hi"});
  check_vec_eq(pt::flatten(boxes), ptest::vec({1, 2, 3, 4, 5, 6, 7, 8}));
  const auto d = pt::cast<double>(boxes);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(d)>, std::vector<thirdparty::Box<double>>>);
  CHECK(d[1].hi[1] == 8.0);
}
