// The C++ side of tests/io/interop.py: writes a checkpoint whose every value follows a closed form of its dotted
// path and row-major index, and loads files written by h5py into matching trees, checking the same closed form.
//
//   io_interop_tool write FILE         a checkpoint of InteropNet with state laid out as Adam's (step 3, lr 0.01;
//                                      scale frozen, layers.1.weight at lr_scale 0.5; metadata epoch=7
//                                      note="interop"); checkpoint_test.cpp checks real optimizers
//   io_interop_tool read-torch FILE    a std::vector<Dense<float>> (paths "0.weight", "0.bias", "1.weight", ...)
//   io_interop_tool read-extra FILE    a tie, a SymmetricMatrix and an int64 buffer
// Exit status 0 when everything matched; otherwise the error on stderr and 1.
#include <geomopt/io.hpp>
#include <geomopt/manifolds.hpp>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace pt = geomopt::ptree;

// The closed form both languages compute: (sum of the path's bytes mod 89) + k / 2.
double closed_form(const std::string& path, long k) {
  long sum = 0;
  for (unsigned char c : path) sum += c;
  return static_cast<double>(sum % 89) + 0.5 * static_cast<double>(k);
}

template <class M>
void set(M& m, const std::string& path) {
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j)
      m(i, j) = static_cast<typename M::Scalar>(closed_form(path, static_cast<long>(i * m.cols() + j)));
}

template <class M>
bool matches(const M& m, const std::string& path) {
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) {
      const auto want = static_cast<typename M::Scalar>(closed_form(path, static_cast<long>(i * m.cols() + j)));
      if (m(i, j) != want) {
        std::fprintf(stderr, "%s(%ld, %ld) = %g, expected %g\n", path.c_str(), static_cast<long>(i),
                     static_cast<long>(j), static_cast<double>(m(i, j)), static_cast<double>(want));
        return false;
      }
    }
  return true;
}

template <class T>
struct Dense {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> weight;
  Eigen::Matrix<T, Eigen::Dynamic, 1> bias;
  GEOMOPT_PTREE(weight, bias)
};

struct InteropNet {
  std::vector<Dense<float>> layers;
  geomopt::SymmetricMatrix<float> sym;
  geomopt::Stiefel<float> st;
  std::shared_ptr<Eigen::MatrixXf> emb, head;  // tied
  float scale = 0;
  pt::Buffer<Eigen::VectorXi> counts;
  GEOMOPT_PTREE(layers, sym, st, emb, head, scale, counts)
};

// The members save_checkpoint reads of an optimizer state (io/checkpoint.hpp), laid out as Adam's: exp_avg and
// exp_avg_sq per trainable leaf that is not frozen, shaped like it (a Stiefel leaf: its tangent coordinates), and the
// per-leaf options as OptimizerState::for_each_leaf_option reports them.
struct AdamLikeState {
  struct Slot {
    std::string path, name;
    Eigen::MatrixXf data;
  };
  std::vector<Slot> slots;
  std::vector<std::pair<std::string, double>> hp{{"lr", 0.01}, {"beta1", 0.9}, {"beta2", 0.999}};
  std::int64_t step_count() const { return 3; }
  void set_step_count(std::int64_t) {}
  std::string_view optimizer() const { return "Adam"; }
  const std::vector<std::pair<std::string, double>>& hyperparameters() const { return hp; }
  template <class F>
  void for_each_slot(F&& f) {
    for (auto& s : slots)
      f(s.path, std::string_view(s.name), Eigen::Map<Eigen::MatrixXf>(s.data.data(), s.data.rows(), s.data.cols()));
  }
  template <class F>
  void for_each_leaf_option(F&& f) const {
    for (const char* path :
         {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias", "sym", "st", "emb"}) {
      const std::string p = path;
      f(p, std::string_view("frozen"), false);
      f(p, std::string_view("lr_scale"), p == "layers.1.weight" ? 0.5 : 1.0);
      if (p == "layers.0.bias") f(p, std::string_view("weight_decay"), 0.0);
      if (p == "st") f(p, std::string_view("retraction"), "cayley");
    }
    f(std::string("scale"), std::string_view("frozen"), true);
  }
  const InteropNet* ema() const { return nullptr; }
};

struct Extra {
  std::shared_ptr<Eigen::MatrixXd> a, b;
  geomopt::SymmetricMatrix<double> sym;
  pt::Buffer<Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>> steps;
  GEOMOPT_PTREE(a, b, sym, steps)
};

int write(const std::string& file) {
  InteropNet net;
  net.layers = {{Eigen::MatrixXf(4, 3), Eigen::VectorXf(4)}, {Eigen::MatrixXf(2, 4), Eigen::VectorXf(2)}};
  for (std::size_t l = 0; l < 2; ++l) {
    set(net.layers[l].weight, "layers." + std::to_string(l) + ".weight");
    set(net.layers[l].bias, "layers." + std::to_string(l) + ".bias");
  }
  net.sym = geomopt::SymmetricMatrix<float>(3);
  set(net.sym.storage(), "sym");
  net.st = geomopt::Stiefel<float>(4, 2);
  net.emb = std::make_shared<Eigen::MatrixXf>(3, 5);
  set(*net.emb, "emb");
  net.head = net.emb;
  net.scale = static_cast<float>(closed_form("scale", 0));
  net.counts = pt::Buffer<Eigen::VectorXi>{Eigen::VectorXi(3)};
  set(*net.counts, "counts");

  AdamLikeState state;
  for (const char* name : {"exp_avg", "exp_avg_sq"}) {
    for (std::size_t l = 0; l < 2; ++l) {
      state.slots.push_back({"layers." + std::to_string(l) + ".weight", name, net.layers[l].weight});
      state.slots.push_back({"layers." + std::to_string(l) + ".bias", name, net.layers[l].bias});
    }
    state.slots.push_back({"sym", name, net.sym.storage()});
    state.slots.push_back({"st", name, Eigen::MatrixXf::Zero(5, 1)});  // dim St(4, 2) = 4*2 - 2*3/2
    state.slots.push_back({"emb", name, *net.emb});
  }
  set(net.st.value(), "st");
  geomopt::io::save_checkpoint(file, net, state, {.attributes = {{"epoch", std::int64_t{7}}, {"note", "interop"}}});
  return 0;
}

int read_torch(const std::string& file) {
  std::vector<Dense<float>> seq = {{Eigen::MatrixXf::Zero(4, 3), Eigen::VectorXf::Zero(4)},
                                   {Eigen::MatrixXf::Zero(2, 4), Eigen::VectorXf::Zero(2)}};
  geomopt::io::load(file, seq);
  bool ok = true;
  for (std::size_t l = 0; l < 2; ++l) {
    ok = matches(seq[l].weight, std::to_string(l) + ".weight") && ok;
    ok = matches(seq[l].bias, std::to_string(l) + ".bias") && ok;
  }
  return ok ? 0 : 1;
}

int read_extra(const std::string& file) {
  Extra e;
  e.a = std::make_shared<Eigen::MatrixXd>(Eigen::MatrixXd::Zero(3, 3));
  e.b = e.a;
  e.sym = geomopt::SymmetricMatrix<double>(3);
  using Steps = Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>;
  e.steps = pt::Buffer<Steps>{Steps::Zero(2)};
  const auto report = geomopt::io::load(file, e);
  bool ok = report.complete() && matches(*e.a, "a") && matches(e.sym.storage(), "sym") && e.a == e.b;
  ok = ok && (*e.steps)(0) == 40 && (*e.steps)(1) == 41;
  if (!ok) std::fprintf(stderr, "read-extra: %s", report.full_report().c_str());
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: io_interop_tool write|read-torch|read-extra FILE\n");
    return 2;
  }
  try {
    if (std::strcmp(argv[1], "write") == 0) return write(argv[2]);
    if (std::strcmp(argv[1], "read-torch") == 0) return read_torch(argv[2]);
    if (std::strcmp(argv[1], "read-extra") == 0) return read_extra(argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "unknown command %s\n", argv[1]);
  return 2;
}
