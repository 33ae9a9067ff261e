// The C++ side of test_torch_cpp.py: steps a model written as a user of the C++ library writes it, by geomopt::Adam
// or geomopt::ManifoldMuon, from the numbers Python wrote, and writes the result back, so that pytest can compare it
// with geomopt.torch's step of the same numbers bit for bit.
//
//   step_tool <in> <out> <steps> <lr> <weight_decay> [adam | manifold_muon <adamw_lr> <adamw_weight_decay>]
//
// <in> holds float32 numbers, each tensor in row-major order as torch stores it: the parameters w (3 x 4), frame
// (2 x 6, orthonormal rows), tall (6 x 2, orthonormal columns) and b (3), then for each step their gradients in the
// same order. <out> receives the parameters after the steps, in the same layout.
#include <Eigen/Core>
#include <cstdlib>
#include <fstream>
#include <geomopt/optimizers.hpp>
#include <iostream>
#include <string>
#include <type_traits>
#include <vector>

namespace {

template <class Matrix>
struct Model {
  Matrix w;                       // torch's (3, 4)
  geomopt::Stiefel<float> frame;  // torch's (2, 6) is this St(6, 2) point's transpose
  geomopt::Stiefel<float> tall;   // torch's (6, 2) is this St(6, 2) point
  Eigen::VectorXf b;
  GEOMOPT_PTREE(w, frame, tall, b)
};

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// Adam's w is any matrix; Muon's is stored as torch stores it, row-major, so that Newton-Schulz sees the same numbers
// in the same order.
using AdamModel = Model<Eigen::MatrixXf>;
using MuonModel = Model<RowMajor>;

// Reads the next tensor of `rows` x `cols`, row-major, into a column-major matrix of the same shape.
Eigen::MatrixXf take(const std::vector<float>& data, std::size_t& at, Eigen::Index rows, Eigen::Index cols) {
  Eigen::MatrixXf m = Eigen::Map<const RowMajor>(data.data() + at, rows, cols);
  at += static_cast<std::size_t>(rows * cols);
  return m;
}

template <class M>
M read_model(const std::vector<float>& data, std::size_t& at) {
  M m;
  m.w = take(data, at, 3, 4);
  m.frame = geomopt::Stiefel<float>(take(data, at, 2, 6).transpose());
  m.tall = geomopt::Stiefel<float>(take(data, at, 6, 2));
  m.b = take(data, at, 3, 1);
  return m;
}

void put(std::vector<float>& out, const Eigen::MatrixXf& m) {
  const RowMajor r = m;
  out.insert(out.end(), r.data(), r.data() + r.size());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string optimizer = argc > 6 ? argv[6] : "adam";
  if (!(argc == 6 || (argc == 7 && optimizer == "adam") || (argc == 9 && optimizer == "manifold_muon"))) {
    std::cerr << "usage: step_tool <in> <out> <steps> <lr> <weight_decay> [adam | manifold_muon <adamw_lr> "
                 "<adamw_weight_decay>]\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary | std::ios::ate);
  const auto bytes = static_cast<std::size_t>(in.tellg());
  in.seekg(0);
  std::vector<float> data(bytes / sizeof(float));
  in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(bytes));
  if (!in) {
    std::cerr << "step_tool: cannot read " << argv[1] << "\n";
    return 1;
  }

  const int steps = std::atoi(argv[3]);
  const double lr = std::atof(argv[4]), weight_decay = std::atof(argv[5]);
  std::vector<float> out;
  auto run = [&]<class M>(auto& opt, std::type_identity<M>) {
    std::size_t at = 0;
    M params = read_model<M>(data, at);
    auto state = opt.init(params);
    for (int k = 0; k < steps; ++k) opt.step(params, read_model<M>(data, at), state);
    put(out, params.w);
    put(out, params.frame.value().transpose());
    put(out, params.tall.value());
    put(out, params.b);
  };
  if (optimizer == "adam") {
    geomopt::Adam adam({.lr = lr, .weight_decay = weight_decay});
    run(adam, std::type_identity<AdamModel>{});
  } else {
    geomopt::ManifoldMuon muon({.lr = lr,
                                .weight_decay = weight_decay,
                                .fallback = {.lr = std::atof(argv[7]), .weight_decay = std::atof(argv[8])}});
    run(muon, std::type_identity<MuonModel>{});
  }
  std::ofstream o(argv[2], std::ios::binary);
  o.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
  return o ? 0 : 1;
}
