// detail/children.hpp and the tie bookkeeping of detail/walker.hpp: a hand-written ptree_walk that disagrees with
// its ptree_children is refused, and ties past the 64 remembered in place are still seen once.
#include "common.hpp"

#include "../support/exception_message.hpp"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// Visits its children in another order than it declares them.
struct Swapped {
  Eigen::VectorXd a;
  double b = 0;
  template <class Visit, class... Self>
  static void ptree_walk(Visit&& visit, Self&&... self) {
    visit("b", self.b...);
    visit("a", self.a...);
  }
  using ptree_children = pt::children<Eigen::VectorXd, double>;
};

// Declares two children and visits one.
struct Short {
  Eigen::VectorXd a;
  Eigen::VectorXd c;
  template <class Visit, class... Self>
  static void ptree_walk(Visit&& visit, Self&&... self) {
    visit("a", self.a...);
  }
  using ptree_children = pt::children<Eigen::VectorXd, Eigen::VectorXd>;
};

// Visits the same member twice: legal types, so it is allowed and walks the member twice.
struct Twice {
  Eigen::VectorXd a;
  template <class Visit, class... Self>
  static void ptree_walk(Visit&& visit, Self&&... self) {
    visit("a", self.a...);
    visit("again", self.a...);
  }
  using ptree_children = pt::children<Eigen::VectorXd, Eigen::VectorXd>;
};

// The message of the std::logic_error f throws, or "" when it throws nothing.
std::string message_of(auto&& f) { return test_support::message_of<std::logic_error>(f).value_or(""); }

}  // namespace

TEST_CASE("a ptree_walk that visits other types than ptree_children lists is refused, naming the child") {
  Swapped s{Eigen::VectorXd::Ones(2), 3.0};
  const std::string m = message_of([&] { (void)pt::count(s); });
  CHECK(m.find("child 0") != std::string::npos);
  CHECK(m.find("\"b\"") != std::string::npos);
  CHECK(s.a == Eigen::VectorXd::Ones(2));
  CHECK(s.b == 3.0);
}

TEST_CASE("a ptree_walk that visits fewer children than ptree_children lists is refused") {
  Short s{Eigen::VectorXd::Ones(2), Eigen::VectorXd::Ones(3)};
  const std::string m = message_of([&] { (void)pt::flatten(s); });
  CHECK(m.find("number of children") != std::string::npos);
}

TEST_CASE("a ptree_walk may visit one member under two names") {
  Twice t{Eigen::VectorXd::Constant(2, 1.5)};
  CHECK(pt::count(t) == 4);
  std::vector<std::string> paths;
  pt::for_each_with_path([&](const pt::Path& p, const auto&) { paths.push_back(p.str()); }, t);
  CHECK(paths == std::vector<std::string>{"a", "again"});
}

TEST_CASE("ties past the first 64 shared nodes are still seen once, at their first path") {
  // 100 shared nodes; every odd one repeats the one before it, so half are aliases, most past the 64th.
  using Node = std::shared_ptr<Eigen::VectorXd>;
  std::vector<Node> v(100);
  for (int i = 0; i < 100; ++i)
    v[i] = (i % 2 == 1) ? v[i - 1] : std::make_shared<Eigen::VectorXd>(Eigen::VectorXd::Constant(2, i));

  CHECK(pt::count(v) == 100);  // 50 distinct vectors of 2
  const auto al = pt::aliases(v);
  REQUIRE(al.size() == 50);
  CHECK(al.front() == std::pair<std::string, std::string>{"1", "0"});
  CHECK(al.back() == std::pair<std::string, std::string>{"99", "98"});

  // Each distinct vector is flattened once: the sum of 2 * (0 + 2 + ... + 98).
  CHECK(pt::flatten(v).sum() == doctest::Approx(2.0 * 2450.0));

  // A tree that breaks the 50th tie (far past the inline record) is a structure error naming it.
  auto w = pt::zeros_like(v);
  CHECK(w[99] == w[98]);
  CHECK(w[98] != v[98]);
  auto broken = w;
  broken[99] = std::make_shared<Eigen::VectorXd>(*w[98]);
  std::string message;
  try {
    pt::for_each([](auto&, auto&) {}, w, broken);
  } catch (const geomopt::StructureError& e) {
    message = e.what();
  }
  CHECK(message == "99: tied to 98 in tree 0, not tied in tree 1");
}
