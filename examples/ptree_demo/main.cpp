// ptree_demo: a small model declared as a parameter tree, then summarised, flattened, walked and rebuilt.
#include <geomopt/ptree.hpp>

#include <Eigen/Core>
#include <iostream>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

namespace pt = geomopt::ptree;

template <class T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

template <class T>
struct Dense {
  Matrix<T> weight;
  Vector<T> bias;
  GEOMOPT_PTREE(weight, bias)
};

template <class T>
struct Mlp {
  std::shared_ptr<Matrix<T>> embed;  // input embedding
  std::vector<Dense<T>> layers;
  pt::Buffer<Vector<T>> running_mean;  // statistics: saved, never trained
  std::optional<T> scale;              // absent: no parameter at all
  std::shared_ptr<Matrix<T>> unembed;  // output projection, tied to embed: one parameter, seen once
  GEOMOPT_PTREE(embed, layers, running_mean, scale, unembed)
};

Dense<float> dense(int in, int out) { return {Matrix<float>::Random(out, in), Vector<float>::Zero(out)}; }

int main() {
  Mlp<float> model;
  model.embed = std::make_shared<Matrix<float>>(Matrix<float>::Random(8, 16));
  model.layers = {dense(8, 32), dense(32, 8)};
  model.running_mean = pt::Buffer<Vector<float>>{Vector<float>::Zero(8)};
  model.scale = 1.0f;
  model.unembed = model.embed;

  std::cout << pt::summary(model) << "\n";

  // One vector of every trainable parameter, in walk order: what an optimizer sees.
  const Eigen::VectorXf flat = pt::flatten(model);
  std::cout << "flatten: " << flat.size() << " floats\n\n";

  std::cout << "walk:\n";
  pt::for_each_with_path(
      [](const pt::Path& path, const auto& leaf) {
        if constexpr (std::is_floating_point_v<std::decay_t<decltype(leaf)>>) {
          std::cout << "  " << path.str() << ": scalar\n";
        } else {
          std::cout << "  " << path.str() << ": " << leaf.rows() << "x" << leaf.cols() << "\n";
        }
      },
      model);

  // Rebuild the model over new values, as after an optimizer step; buffers and ties come from the prototype.
  const Eigen::VectorXf step = Eigen::VectorXf::LinSpaced(flat.size(), -1.0f, 1.0f);
  const Mlp<float> rebuilt = pt::unflatten(model, step);
  const bool ok = pt::flatten(rebuilt) == step && rebuilt.embed == rebuilt.unembed && rebuilt.embed != model.embed &&
                  *rebuilt.running_mean == *model.running_mean;
  std::cout << "\nround trip: " << (ok ? "ok" : "FAILED") << "\n";
  return ok ? 0 : 1;
}
