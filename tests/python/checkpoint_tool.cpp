// The C++ side of test_io.py: a model written as a user of the C++ library writes it, stepped by geomopt::Adam and
// checkpointed by geomopt::io, so that pytest can move checkpoints between it and geomopt.io in both directions and
// compare the continued runs bit for bit.
//
//   checkpoint_tool start  <params.bin> <grads.bin> <steps> <out.h5>   the parameters from Python's numbers, <steps>
//                                                                      steps, then a checkpoint
//   checkpoint_tool resume <in.h5>      <grads.bin> <steps> <out.h5>   a checkpoint (from Python), <steps> more steps,
//                                                                      then a checkpoint
//
// The binary files hold float32 numbers, each tensor in row-major order as torch stores it, in the order of the
// Python module's named_parameters(): frame (2 x 6, orthonormal rows: the St(6, 2) point's transpose), tall (6 x 2,
// orthonormal columns), fc.weight (3 x 4), fc.bias (3); <grads.bin> holds <steps> such sets. The tree declares its
// members in another order than the module: a checkpoint is matched by name. The buffer "seen" counts the steps, as a
// module's int64 buffer. Adam: lr 1e-2, weight decay 0.1, as test_io.py's optimizer.
#include <Eigen/Core>
#include <cstdint>
#include <fstream>
#include <geomopt/io.hpp>
#include <geomopt/optimizers.hpp>
#include <iostream>
#include <string>
#include <vector>

namespace {

struct Fc {
  Eigen::MatrixXf weight;
  Eigen::VectorXf bias;
  GEOMOPT_PTREE(weight, bias)
};

struct Model {
  geomopt::Stiefel<float> tall;
  geomopt::Stiefel<float> frame;
  geomopt::ptree::Buffer<Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>> seen;
  Fc fc;
  GEOMOPT_PTREE(tall, frame, seen, fc)
};

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::vector<float> read_floats(const std::string& file) {
  std::ifstream in(file, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot read " + file);
  std::vector<float> data(static_cast<std::size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  return data;
}

// The next tensor of rows x cols numbers, row-major, as a column-major matrix of that shape.
Eigen::MatrixXf take(const std::vector<float>& data, std::size_t& at, Eigen::Index rows, Eigen::Index cols) {
  if (at + static_cast<std::size_t>(rows * cols) > data.size()) throw std::runtime_error("the binary file is short");
  Eigen::MatrixXf m = Eigen::Map<const RowMajor>(data.data() + at, rows, cols);
  at += static_cast<std::size_t>(rows * cols);
  return m;
}

Model read_model(const std::vector<float>& data, std::size_t& at) {
  Model m;
  m.frame = geomopt::Stiefel<float>(take(data, at, 2, 6).transpose());
  m.tall = geomopt::Stiefel<float>(take(data, at, 6, 2));
  m.fc.weight = take(data, at, 3, 4);
  m.fc.bias = take(data, at, 3, 1);
  *m.seen = Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>::Zero(1);
  return m;
}

// A model of the right shapes whose numbers a checkpoint overwrites.
Model blank_model() {
  Model m;
  m.fc.weight = Eigen::MatrixXf::Zero(3, 4);
  m.fc.bias = Eigen::VectorXf::Zero(3);
  m.frame = geomopt::Stiefel<float>(Eigen::MatrixXf::Identity(6, 2));
  m.tall = geomopt::Stiefel<float>(Eigen::MatrixXf::Identity(6, 2));
  *m.seen = Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>::Zero(1);
  return m;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 6) {
    std::cerr << "usage: checkpoint_tool start|resume <params.bin|in.h5> <grads.bin> <steps> <out.h5>\n";
    return 2;
  }
  const std::string mode = argv[1];
  const std::vector<float> grads = read_floats(argv[3]);
  const int steps = std::stoi(argv[4]);

  if (mode != "start" && mode != "resume") throw std::runtime_error("unknown mode " + mode);
  geomopt::Adam adam({.lr = 1e-2, .weight_decay = 0.1});
  std::size_t at = 0;
  Model model = mode == "start" ? read_model(read_floats(argv[2]), at) : blank_model();
  auto state = adam.init(model);
  if (mode == "resume") geomopt::io::load_checkpoint(argv[2], model, state);

  at = 0;
  for (int k = 0; k < steps; ++k) {
    Model g = read_model(grads, at);
    adam.step(model, g, state);
    ++(*model.seen)(0);
  }
  geomopt::io::save_checkpoint(argv[5], model, state);
  return 0;
} catch (const std::exception& e) {
  std::cerr << "checkpoint_tool: " << e.what() << "\n";
  return 1;
}
