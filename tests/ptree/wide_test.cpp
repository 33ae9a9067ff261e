// A wide struct: 400 members declared with GEOMOPT_PTREE (tests/ptree/wide_400.hpp).
#include "common.hpp"

#include "wide_400.hpp"

#include <string>
#include <vector>

static_assert(std::is_same_v<pt::scalar_t<Wide400>, double>);

namespace {
// "m<i>", built by appending: g++ 12 at -O3 reports a false -Wrestrict on "m" + std::to_string(i).
std::string member_name(int i) {
  std::string s = "m";
  s += std::to_string(i);
  return s;
}

Wide400 make_wide() {
  Wide400 w{};
  // Fill by hand through the member layout we know: entry k of the flat vector is k.
  return w;
}
}  // namespace

TEST_CASE("wide struct: count, layout paths, offsets and dims") {
  Wide400 w = make_wide();
  w.m0 = 1.5;
  w.m399 = Eigen::Vector2d(7, 8);
  w.m200 = -2;
  CHECK(ptest::ll(pt::count(w)) == 200 * 1 + 200 * 2);

  std::vector<ptest::ExpectedLeaf> expected;
  long long offset = 0;
  for (int i = 0; i < 400; ++i) {
    const long long size = i % 2 == 0 ? 1 : 2;
    expected.push_back(
        {member_name(i), offset, size, i % 2 == 0 ? std::vector<long long>{} : std::vector<long long>{2}});
    offset += size;
  }
  ptest::check_layout(pt::layout(w), expected, 600);

  const auto v = pt::flatten(w);
  REQUIRE(v.size() == 600);
  CHECK(v[0] == 1.5);
  CHECK(v[300] == -2.0);  // m200 follows 100 doubles and 100 vectors before it
  CHECK(v[598] == 7.0);
  CHECK(v[599] == 8.0);

  std::vector<std::string> paths;
  pt::for_each_with_path([&](const pt::Path& p, const auto&) { paths.push_back(std::string(p.str())); }, w);
  REQUIRE(paths.size() == 400);
  CHECK(paths[0] == "m0");
  CHECK(paths[137] == "m137");
  CHECK(paths[399] == "m399");

  Eigen::VectorXd u(600);
  for (int i = 0; i < 600; ++i) u[i] = i;
  pt::unflatten_into(w, u);
  CHECK(w.m0 == 0.0);
  CHECK(w.m1[1] == 2.0);
  CHECK(w.m2 == 3.0);
  CHECK(w.m399[0] == 598.0);
  const auto w2 = pt::unflatten(w, (u * 2).eval());
  CHECK(w2.m398 == 2.0 * 597);
  CHECK(pt::visits(w).size() == 400);
  CHECK(pt::visits(w)[3] == "m3: leaf 2");

  // Walking two wide trees together.
  double dot = pt::fold(
      [](double acc, const auto& a, const auto& b) {
        if constexpr (ptest::is_eigen_v<decltype(a)>) {
          return acc + a.dot(b);
        } else {
          return acc + a * b;
        }
      },
      0.0, w, w2);
  CHECK(dot == doctest::Approx(2 * u.squaredNorm()));
}
