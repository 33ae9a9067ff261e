// geomopt-inspect and describe (io/inspect.hpp): the summary of a file written by save_checkpoint, read back from
// the command-line tool's output, and its exit status for files it cannot read.
#include "common.hpp"

#include <geomopt/io.hpp>

#include <cstdio>
#include <memory>
#include <string>

namespace {

struct Small {
  Eigen::MatrixXf w;
  Eigen::VectorXf b;
  std::shared_ptr<Eigen::VectorXf> p, q;
  pt::Buffer<Eigen::VectorXi> counts;
  GEOMOPT_PTREE(w, b, p, q, counts)
};

std::pair<int, std::string> run(const std::string& args) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(
      ::popen((std::string(GEOMOPT_INSPECT) + " " + args + " 2>&1").c_str(), "r"), ::pclose);
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  const int status = ::pclose(pipe.release());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace

TEST_CASE("geomopt-inspect prints leaves, aliases, optimizer state and metadata") {
  iotest::ScratchDir dir("inspect");
  Small s{Eigen::MatrixXf::Zero(4, 3), Eigen::VectorXf::Zero(4), std::make_shared<Eigen::VectorXf>(5), nullptr,
          pt::Buffer<Eigen::VectorXi>{Eigen::VectorXi::Zero(2)}};
  s.q = s.p;
  iotest::FakeState<float, Small> st;
  st.hp = {{"lr", 0.5}, {"momentum", 0.25}};
  st.step = 42;
  st.slots = {{"w", "velocity", Eigen::MatrixXf::Zero(4, 3)},
              {"b", "velocity", Eigen::MatrixXf::Zero(4, 1)},
              {"p", "velocity", Eigen::MatrixXf::Zero(5, 1)}};
  geomopt::io::save_checkpoint(dir.file("c.h5"), s, st, {.attributes = {{"epoch", std::int64_t{9}}}});

  // Not structured bindings: CAPTURE refers to `out` from a lambda, which C++20 allows but clang 14 does not.
  const auto result = run(dir.file("c.h5"));
  const int status = result.first;
  const std::string& out = result.second;
  CAPTURE(out);
  CHECK(status == 0);
  for (const char* needle : {"format=\"geomopt\"", "/params:", "  w       float32  4x3        12     48  yes",
                             "  counts  int32    2           2      8  no (buffer)", "alias: q -> p",
                             "total: 21 trainable values (84 B), 2 buffer values (8 B), 4 leaves, 1 alias",
                             "/optimizer: lr=0.5 momentum=0.25 optimizer=\"Fake\" step=42", "w.velocity", "  -",
                             "total: 21 state values (84 B), 3 leaves, 0 aliases", "/metadata: epoch=9 step=42"})
    CHECK_MESSAGE(out.find(needle) != std::string::npos, std::string(needle));
  CHECK(out == geomopt::io::describe(dir.file("c.h5")));

  // Fake state loads back too: only the members above are needed.
  Small t = s;
  t.p = std::make_shared<Eigen::VectorXf>(5);
  t.q = t.p;
  CHECK(geomopt::io::load_checkpoint(dir.file("c.h5"), t, st).complete());

  iotest::write_bytes(dir.file("junk.h5"), "junk", 4);
  const auto [bad, message] = run(dir.file("junk.h5") + " " + dir.file("c.h5"));
  CHECK(bad == 1);
  CHECK(message.find("junk.h5 is not an HDF5 file") != std::string::npos);
  CHECK(message.find("/metadata") != std::string::npos);  // the other file is still printed
  CHECK(run("").first == 2);
}
