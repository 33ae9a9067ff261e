// Manifold points and tangents as ptree leaves, and the retractions on ceres::Jet:
//   - every point type and ScaledSymmetricMatrix round trips through flatten / unflatten inside a GEOMOPT_PTREE
//     struct, with its layout, its name in summary(), rebind_t and cast;
//   - unflatten into ceres::Jet gives points of Jets (rebuild), whose seeded derivatives land on the right entries;
//   - the tangent vectors of every manifold round trip through unflatten, cast and zeros_like;
//   - retract on Stiefel<Jet> and SPD<Jet>: the value part equals the double retraction and the derivative part, seeded
//     on tangent coordinates (and on point entries), equals central finite differences of the double retraction.
#include <ceres/jet.h>

#include <string>
#include <type_traits>
#include <vector>

#include "manifold_properties.hpp"

namespace pt = geomopt::ptree;
using geomopt::Retraction;
using geomopt::Rng;
using manifold_props::MatD;

namespace {

constexpr int kSeeds = 8;
using Jet = ceres::Jet<double, kSeeds>;

template <class T>
struct Points {
  geomopt::Stiefel<T> st;
  geomopt::Grassmann<T> gr;
  geomopt::Sphere<T> sp;
  geomopt::SpecialOrthogonal<T> so;
  geomopt::SPD<T> spd;
  geomopt::ScaledSymmetricMatrix<T> w;
  GEOMOPT_PTREE(st, gr, sp, so, spd, w)
};

Points<double> make_points(Rng& rng) {
  Points<double> p;
  p.st = geomopt::Stiefel<double>::random_point(rng, 6, 2);
  p.gr = geomopt::Grassmann<double>::random_point(rng, 6, 2);
  p.sp = geomopt::Sphere<double>::random_point(rng, 4);
  p.so = geomopt::SpecialOrthogonal<double>::random_point(rng, 3);
  p.spd = geomopt::SPD<double>::random_point(rng, 3);
  p.w = random_tangent(p.spd, rng);
  return p;
}

// The value and the derivative parts of a matrix of Jets.
template <class M>
MatD value_part(const M& m) {
  MatD out(m.rows(), m.cols());
  for (Eigen::Index j = 0; j < m.cols(); ++j)
    for (Eigen::Index i = 0; i < m.rows(); ++i) out(i, j) = m(i, j).a;
  return out;
}
template <class M>
MatD derivative_part(const M& m, int k) {
  MatD out(m.rows(), m.cols());
  for (Eigen::Index j = 0; j < m.cols(); ++j)
    for (Eigen::Index i = 0; i < m.rows(); ++i) out(i, j) = m(i, j).v[k];
  return out;
}

// v as Jets, with the derivative of entry seeds[k] seeded in slot k.
Eigen::Matrix<Jet, Eigen::Dynamic, 1> seeded(const Eigen::VectorXd& v, const std::vector<Eigen::Index>& seeds) {
  Eigen::Matrix<Jet, Eigen::Dynamic, 1> out(v.size());
  for (Eigen::Index i = 0; i < v.size(); ++i) out[i] = Jet(v[i]);
  for (std::size_t k = 0; k < seeds.size(); ++k) out[seeds[k]].v[static_cast<int>(k)] = 1.0;
  return out;
}

// A copy of the leaf with its flattened coordinate k moved by delta (through the storage blocks, in place).
template <class L>
L with_coordinate(L leaf, Eigen::Index k, double delta) {
  Eigen::Index offset = 0;
  pt::for_each_storage(
      [&](auto& block) {
        if (k >= offset && k < offset + block.size()) block.data()[k - offset] += delta;
        offset += block.size();
      },
      leaf);
  return leaf;
}

// Checks retract on M<Jet> against central differences of retract on M<double>, seeding the tangent coordinates
// `seeds` (through unflatten into Jet).
template <template <class> class M>
void check_jet_retraction(const M<double>& x, const typename M<double>::Tangent& xi,
                          const std::vector<Eigen::Index>& seeds, const std::string& label) {
  const auto xi_jet = pt::unflatten(xi, seeded(manifold_props::coords(xi), seeds));
  static_assert(std::is_same_v<std::remove_const_t<decltype(xi_jet)>, typename M<Jet>::Tangent>);
  const M<Jet> x_jet(x.value().template cast<Jet>());
  const double h = 1e-6;
  for (const Retraction r : manifold_props::kRetractions) {
    CAPTURE(manifold_props::name_of(r));
    M<Jet> y_jet = x_jet;
    retract(y_jet, xi_jet, r);
    const MatD y = manifold_props::retracted(x, xi, r).value();
    MPROPS_CHECK_LE(label, std::string("Jet value part - double retraction ") + manifold_props::name_of(r),
                    manifold_props::rel(value_part(y_jet.value()), y), 1e-13);
    double worst = 0;
    for (std::size_t k = 0; k < seeds.size(); ++k) {
      const MatD plus = manifold_props::retracted(x, with_coordinate(xi, seeds[k], h), r).value();
      const MatD minus = manifold_props::retracted(x, with_coordinate(xi, seeds[k], -h), r).value();
      const MatD fd = (plus - minus) / (2 * h);
      const MatD jet = derivative_part(y_jet.value(), static_cast<int>(k));
      worst = std::max(worst, (jet - fd).norm() / std::max(1.0, fd.norm()));
      CHECK(jet.norm() > 0);  // the seed reached the result
    }
    MPROPS_CHECK_LE(label, std::string("Jet derivative - central difference ") + manifold_props::name_of(r), worst,
                    1e-6);
  }
}

}  // namespace

TEST_CASE("ptree: manifold points and ScaledSymmetricMatrix round trip through flatten and unflatten") {
  static_assert(std::is_same_v<pt::rebind_t<geomopt::Stiefel<double>, float>, geomopt::Stiefel<float>>);
  static_assert(std::is_same_v<pt::rebind_t<geomopt::Grassmann<double>, float>, geomopt::Grassmann<float>>);
  static_assert(std::is_same_v<pt::rebind_t<geomopt::Sphere<double>, float>, geomopt::Sphere<float>>);
  static_assert(
      std::is_same_v<pt::rebind_t<geomopt::SpecialOrthogonal<double>, float>, geomopt::SpecialOrthogonal<float>>);
  static_assert(std::is_same_v<pt::rebind_t<geomopt::SPD<double>, float>, geomopt::SPD<float>>);
  static_assert(std::is_same_v<pt::rebind_t<geomopt::ScaledSymmetricMatrix<double>, float>,
                               geomopt::ScaledSymmetricMatrix<float>>);
  static_assert(std::is_same_v<pt::rebind_t<Points<double>, float>, Points<float>>);
  static_assert(std::is_same_v<pt::rebind_t<Points<double>, Jet>, Points<Jet>>);
  static_assert(std::is_same_v<pt::scalar_t<Points<float>>, float>);

  Rng rng(31);
  const Points<double> p = make_points(rng);
  const Eigen::VectorXd v = pt::flatten(p);
  CHECK(v.size() == 12 + 12 + 4 + 9 + 9 + 6);
  CHECK(pt::count(p) == v.size());

  // The layout: one leaf per point, its value column-major, in declaration order.
  const pt::Layout layout = pt::layout(p);
  REQUIRE(layout.leaves.size() == 6);
  const std::vector<std::string> paths = {"st", "gr", "sp", "so", "spd", "w"};
  const std::vector<std::vector<Eigen::Index>> dims = {{6, 2}, {6, 2}, {4}, {3, 3}, {3, 3}, {6}};
  const std::vector<MatD> values = {p.st.value(), p.gr.value(),  p.sp.value(),
                                    p.so.value(), p.spd.value(), p.w.storage()};
  Eigen::Index offset = 0;
  for (std::size_t i = 0; i < 6; ++i) {
    CAPTURE(paths[i]);
    CHECK(layout.leaves[i].path == paths[i]);
    CHECK(layout.leaves[i].dims == dims[i]);
    CHECK(layout.leaves[i].offset == offset);
    CHECK(layout.leaves[i].size == values[i].size());
    CHECK(v.segment(offset, values[i].size()) == Eigen::Map<const Eigen::VectorXd>(values[i].data(), values[i].size()));
    offset += values[i].size();
  }

  // summary() names each leaf by its ptree_type_name.
  const std::string summary = pt::summary(p);
  const std::vector<std::string> names = {"Stiefel",           "Grassmann", "Sphere",
                                          "SpecialOrthogonal", "SPD",       "ScaledSymmetricMatrix"};
  for (std::size_t i = 0; i < 6; ++i) {
    CAPTURE(summary);
    CAPTURE(paths[i]);
    bool found = false;
    std::size_t start = 0;
    while (start < summary.size()) {
      const std::size_t end = std::min(summary.find('\n', start), summary.size());
      const std::string line = summary.substr(start, end - start);
      if (line.rfind(paths[i] + " ", 0) == 0) found = line.find(" " + names[i] + " ") != std::string::npos;
      if (found) break;
      start = end + 1;
    }
    CHECK(found);
  }
  CHECK(pt::visits(p) == std::vector<std::string>{"st: leaf 6x2", "gr: leaf 6x2", "sp: leaf 4", "so: leaf 3x3",
                                                  "spd: leaf 3x3", "w: leaf 6"});

  // Round trips, and unflatten of another vector lands in the right leaves.
  const Points<double> back = pt::unflatten(p, v);
  CHECK(back.st.value() == p.st.value());
  CHECK(back.gr.value() == p.gr.value());
  CHECK(back.sp.value() == p.sp.value());
  CHECK(back.so.value() == p.so.value());
  CHECK(back.spd.value() == p.spd.value());
  CHECK(back.w.storage() == p.w.storage());
  CHECK(back.w.n() == 3);
  const Points<double> doubled = pt::unflatten(p, Eigen::VectorXd(2 * v));
  CHECK(doubled.sp.value() == 2 * p.sp.value());
  CHECK(doubled.w.dense() == 2 * p.w.dense());
  CHECK(check(doubled.so) == doctest::Approx(3 * std::sqrt(3.0)).epsilon(1e-12));
  CHECK_THROWS_AS((void)pt::unflatten(p, Eigen::VectorXd(v.size() - 1)), std::invalid_argument);

  // cast to float keeps every point on its manifold to float precision.
  const Points<float> f = pt::cast<float>(p);
  CHECK(f.st.value() == p.st.value().cast<float>());
  CHECK(check(f.st) < 1e-5f);
  CHECK(check(f.so) < 1e-5f);
  CHECK(check(f.spd) < 1e-5f);

  // rebuild with a value of the wrong shape names the manifold and the expected shape.
  const std::string message = manifold_props::invalid_argument_message(
      [&] { (void)geomopt::rebuild(p.st, Eigen::MatrixXd(Eigen::MatrixXd::Zero(7, 2))); });
  CHECK(message.find("Stiefel") != std::string::npos);
  CHECK(message.find("6x2") != std::string::npos);
}

TEST_CASE("ptree: unflatten into ceres::Jet gives points of Jets with the seeded derivatives in place") {
  Rng rng(32);
  const Points<double> p = make_points(rng);
  const Eigen::VectorXd v = pt::flatten(p);
  // Seeds: two entries of st, one of gr, sp, so, two of spd, one of w.
  const std::vector<Eigen::Index> seeds = {0, 7, 12 + 5, 24 + 3, 28 + 4, 37 + 1, 37 + 3, 46 + 2};
  const Points<Jet> pj = pt::unflatten(p, seeded(v, seeds));
  static_assert(std::is_same_v<decltype(pj.st), geomopt::Stiefel<Jet>>);
  static_assert(std::is_same_v<decltype(pj.spd), geomopt::SPD<Jet>>);
  CHECK(value_part(pj.st.value()) == p.st.value());
  CHECK(value_part(pj.gr.value()) == p.gr.value());
  CHECK(value_part(pj.sp.value()) == MatD(p.sp.value()));
  CHECK(value_part(pj.so.value()) == p.so.value());
  CHECK(value_part(pj.spd.value()) == p.spd.value());
  CHECK(value_part(pj.w.storage()) == MatD(p.w.storage()));
  // The flattened Jets carry the seeds where they were put.
  const auto back = pt::flatten(pj);
  for (Eigen::Index i = 0; i < back.size(); ++i) {
    for (int k = 0; k < kSeeds; ++k) {
      CHECK(back[i].v[k] == (seeds[static_cast<std::size_t>(k)] == i ? 1.0 : 0.0));
    }
  }
  CHECK(pj.st.value()(1, 1).v[1] == 1.0);   // entry 7 of st, column-major: (1, 1)
  CHECK(pj.spd.value()(1, 0).v[5] == 1.0);  // entry 1 of spd: (1, 0)
  CHECK(pj.w.n() == 3);
}

TEST_CASE("ptree: tangent vectors of every manifold round trip through unflatten, cast and zeros_like") {
  Rng rng(33);
  const auto round_trip = [](const auto& xi, const std::string& name) {
    CAPTURE(name);
    try {
      const auto back = pt::unflatten(xi, pt::flatten(xi));
      CHECK(manifold_props::coords(back) == manifold_props::coords(xi));
      CHECK(back.n() == xi.n());
      const auto zero = pt::zeros_like(xi);
      CHECK(zero.n() == xi.n());
      CHECK(manifold_props::coords(zero).norm() == 0);
      const auto as_float = pt::cast<float>(xi);
      CHECK(as_float.n() == xi.n());
    } catch (const std::exception& e) {
      const std::string failure = name + ": " + e.what();
      FAIL_CHECK(failure);
    }
  };
  round_trip(random_tangent(geomopt::Stiefel<double>::random_point(rng, 6, 2), rng), "Stiefel St(6, 2)");
  round_trip(random_tangent(geomopt::Grassmann<double>::random_point(rng, 6, 2), rng), "Grassmann Gr(6, 2)");
  round_trip(random_tangent(geomopt::SpecialOrthogonal<double>::random_point(rng, 3), rng), "SpecialOrthogonal SO(3)");
  round_trip(random_tangent(geomopt::SPD<double>::random_point(rng, 3), rng), "SPD(3)");
  // n = 1: the skew block is empty, and a packed vector of length 0 is the skew matrix of order 0 or 1.
  round_trip(random_tangent(geomopt::Sphere<double>::random_point(rng, 4), rng), "Sphere(4), a lift with n = 1");
  round_trip(random_tangent(geomopt::Stiefel<double>::random_point(rng, 5, 1), rng), "Stiefel St(5, 1)");
  round_trip(geomopt::SkewSymMatrix<double>(1), "SkewSymMatrix of order 1 (the tangent of SO(1))");
}

TEST_CASE(
    "Jet: retract on Stiefel<Jet> St(10, 3) equals the double retraction, with derivatives by finite "
    "differences") {
  Rng rng(34);
  const auto x = geomopt::Stiefel<double>::random_point(rng, 10, 3);
  // Tangent coordinates: A's three packed entries, then B (7 x 3) column-major.
  const std::vector<Eigen::Index> seeds = {0, 1, 2, 3, 9, 12, 17, 23};
  for (const double norm : {0.8, 4.0}) {
    CAPTURE(norm);
    check_jet_retraction<geomopt::Stiefel>(x, manifold_props::tangent_of_norm(x, rng, norm), seeds,
                                           "Stiefel<Jet> St(10, 3)");
  }
}

TEST_CASE("Jet: retract on SPD<Jet> SPD(5) equals the double retraction, with derivatives by finite differences") {
  Rng rng(35);
  const auto x = geomopt::SPD<double>::random_point(rng, 5);
  const std::vector<Eigen::Index> seeds = {0, 1, 2, 4, 7, 9, 12, 14};
  for (const double norm : {0.8, 3.0}) {
    CAPTURE(norm);
    check_jet_retraction<geomopt::SPD>(x, manifold_props::tangent_of_norm(x, rng, norm), seeds, "SPD<Jet> SPD(5)");
  }
}

TEST_CASE("Jet: the derivative of the Stiefel retraction with respect to the point, through unflatten into Jet") {
  // The retraction reads the point through its section (a Householder QR), a smooth function of the point's entries
  // near x, so the derivative with respect to an entry of x is a central difference of the double retraction.
  Rng rng(36);
  const Points<double> p = make_points(rng);
  const std::vector<Eigen::Index> seeds = {0, 1, 3, 5, 6, 8, 10, 11};  // entries of st (6 x 2), column-major
  const Points<Jet> pj = pt::unflatten(p, seeded(pt::flatten(p), seeds));
  const auto xi = manifold_props::tangent_of_norm(p.st, rng, 1.2);
  const geomopt::StiefelLieAlgHorMatrix<Jet> xi_jet(
      geomopt::SkewSymMatrix<Jet>::from_storage(xi.A().storage().cast<Jet>()), xi.B().cast<Jet>());
  const double h = 1e-6;
  for (const Retraction r : manifold_props::kRetractions) {
    CAPTURE(manifold_props::name_of(r));
    geomopt::Stiefel<Jet> y = pj.st;
    retract(y, xi_jet, r);
    CHECK(manifold_props::rel(value_part(y.value()), manifold_props::retracted(p.st, xi, r).value()) < 1e-13);
    double worst = 0;
    for (std::size_t k = 0; k < seeds.size(); ++k) {
      geomopt::Stiefel<double> plus = p.st, minus = p.st;
      plus.value().data()[seeds[k]] += h;
      minus.value().data()[seeds[k]] -= h;
      const MatD fd =
          (manifold_props::retracted(plus, xi, r).value() - manifold_props::retracted(minus, xi, r).value()) / (2 * h);
      worst = std::max(worst, (derivative_part(y.value(), static_cast<int>(k)) - fd).norm() / std::max(1.0, fd.norm()));
    }
    MPROPS_CHECK_LE("Stiefel<Jet> point St(6, 2)",
                    std::string("Jet derivative in the point - central difference ") + manifold_props::name_of(r),
                    worst, 1e-6);
  }
}
