// A tour of geomopt's optimizers: each one trains the same small models; docs/optimizers.md shows the regions
// between the snippet markers verbatim. The program exits non-zero if any run fails to reduce its loss.
#include <Eigen/Core>
#include <cmath>
#include <cstdio>
#include <geomopt/optimizers.hpp>
#include <span>
#include <string>

// A linear model y = W x + b, and its squared loss on a fixed batch.
template <class T>
struct Linear {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> weight;
  Eigen::Matrix<T, Eigen::Dynamic, 1> bias;
  GEOMOPT_PTREE(weight, bias)
};

struct Batch {
  Eigen::MatrixXd x, y;  // inputs (3 x m) and targets (4 x m)
};

Batch make_batch() {
  geomopt::Rng rng(7);
  std::normal_distribution<double> normal;
  Batch batch{Eigen::MatrixXd(3, 64), Eigen::MatrixXd(4, 64)};
  for (Eigen::Index i = 0; i < batch.x.size(); ++i) batch.x(i) = normal(rng);
  Eigen::MatrixXd w(4, 3);
  for (Eigen::Index i = 0; i < w.size(); ++i) w(i) = normal(rng);
  batch.y = (w * batch.x).colwise() + Eigen::Vector4d(1, -2, 0.5, 3);
  return batch;
}

Linear<double> zero_model() { return {Eigen::MatrixXd::Zero(4, 3), Eigen::VectorXd::Zero(4)}; }

// The mean squared error and, in grads, its gradient.
double loss(const Linear<double>& model, const Batch& batch, Linear<double>& grads) {
  const auto m = static_cast<double>(batch.x.cols());
  const Eigen::MatrixXd residual = ((model.weight * batch.x).colwise() + model.bias) - batch.y;
  grads.weight = residual * batch.x.transpose() * (2 / m);
  grads.bias = residual.rowwise().sum() * (2 / m);
  return residual.squaredNorm() / m;
}

// Trains a fresh linear model with any optimizer and returns the final loss over the first.
template <class Optimizer>
double train(Optimizer& optimizer, int steps) {
  const Batch batch = make_batch();
  Linear<double> model = zero_model(), grads = zero_model();
  auto state = optimizer.init(model);
  const double first = loss(model, batch, grads);
  double last = first;
  for (int t = 0; t < steps; ++t) {
    optimizer.step(model, grads, state);
    last = loss(model, batch, grads);
  }
  return last / first;
}

// snippet-begin: sgd
double sgd_example() {
  geomopt::SGD sgd({.lr = 0.05, .momentum = 0.9, .dampening = 0, .nesterov = true, .weight_decay = 0});
  return train(sgd, 200);
}
// snippet-end: sgd

// snippet-begin: adam
double adam_example() {
  // Half the learning rate for biases, chosen by path; the cosine schedule warms up over 10 steps.
  geomopt::Adam adam({.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0, .amsgrad = false},
                     {.schedule = geomopt::schedules::cosine(300, 10), .clip_norm = 10});
  const Batch batch = make_batch();
  Linear<double> model = zero_model(), grads = zero_model();
  auto state = adam.init(model, [](const geomopt::ptree::Path& path) {
    return geomopt::LeafOptions{.lr_scale = path.str() == "bias" ? 0.5 : 1.0};
  });
  const double first = loss(model, batch, grads);
  for (int t = 0; t < 300; ++t) {
    adam.step(model, grads, state);
    loss(model, batch, grads);
  }
  std::printf("  Adam state: %zu bytes for %td parameters\n", state.nbytes(), state.coordinates());
  return loss(model, batch, grads) / first;
}
// snippet-end: adam

// snippet-begin: adamw
double adamw_example() {
  geomopt::AdamW adamw({.lr = 0.05, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2},
                       {.ema_decay = 0.9});
  const Batch batch = make_batch();
  Linear<double> model = zero_model(), grads = zero_model();
  auto state = adamw.init(model);
  const double first = loss(model, batch, grads);
  for (int t = 0; t < 300; ++t) {
    adamw.step(model, grads, state);
    loss(model, batch, grads);
  }
  Linear<double> averaged = geomopt::ema_params(state);  // the moving average, for evaluation
  return loss(averaged, batch, grads) / first;
}
// snippet-end: adamw

// snippet-begin: rmsprop
double rmsprop_example() {
  geomopt::RMSprop rmsprop({.lr = 0.01, .alpha = 0.99, .eps = 1e-8, .weight_decay = 0, .momentum = 0.5,
                            .centered = true});
  return train(rmsprop, 300);
}
// snippet-end: rmsprop

// snippet-begin: adagrad
double adagrad_example() {
  geomopt::Adagrad adagrad({.lr = 0.5, .lr_decay = 0, .weight_decay = 0, .initial_accumulator_value = 0.1,
                            .eps = 1e-10});
  return train(adagrad, 300);
}
// snippet-end: adagrad

// snippet-begin: manifold
// An orthonormal frame Y in St(6, 3) and free W, b in one tree: fit Y W + b 1^T to B.
template <class T>
struct Frame {
  geomopt::Stiefel<T> Y;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> W;
  Eigen::Matrix<T, Eigen::Dynamic, 1> b;
  GEOMOPT_PTREE(Y, W, b)
};

double manifold_example() {
  geomopt::Rng rng(3);
  const Eigen::MatrixXd B = Eigen::MatrixXd::Random(6, 4);
  Frame<double> params{geomopt::Stiefel<double>::random_point(rng, 6, 3), Eigen::MatrixXd::Zero(3, 4),
                       Eigen::VectorXd::Zero(6)};
  Frame<double> grads = params;
  auto fit = [&] {  // loss and Euclidean gradients
    const Eigen::MatrixXd r = ((params.Y.value() * params.W).colwise() + params.b) - B;
    grads.Y.value() = r * params.W.transpose();
    grads.W = params.Y.value().transpose() * r;
    grads.b = r.rowwise().sum();
    return 0.5 * r.squaredNorm();
  };
  // Y is stepped on St(6, 3): its moments live in tangent coordinates, the update is retracted (Cayley).
  geomopt::Adam adam({.lr = 0.05}, {.retraction = geomopt::Retraction::cayley});
  auto state = adam.init(params);
  const double first = fit();
  for (int t = 0; t < 200; ++t) {
    adam.step(params, grads, state);
    fit();
  }
  std::printf("  St(6, 3) after 200 steps: |Y^T Y - I| = %.1e\n", geomopt::check(params.Y));
  return fit() / first;
}
// snippet-end: manifold

// snippet-begin: kernel
// A new optimizer is a kernel: sign descent, p <- p - lr sign(m), with m a momentum of the gradient.
struct SignumKernel {
  static constexpr const char* kName = "Signum";
  struct Options {
    double lr = 1e-2;
    double beta = 0.9;
    void validate() const {
      if (!(lr >= 0 && beta >= 0 && beta < 1)) throw std::invalid_argument("Signum: need lr >= 0, 0 <= beta < 1");
    }
  };
  static std::span<const char* const> slots(const Options&) {
    static constexpr const char* kSlots[] = {"momentum"};
    return kSlots;
  }
  template <class T>
  struct Coeffs {
    T lr, beta;
  };
  template <class T>
  static Coeffs<T> coefficients(const Options& o, const geomopt::LeafStep& s) {
    return {T(s.lr), T(o.beta)};
  }
  template <class T>
  static void update(const Coeffs<T>& c, geomopt::Chunk<T>& x) {
    x.s[0] = c.beta * x.s[0] + (1 - c.beta) * x.g;
    x.p -= c.lr * x.s[0].sign();
  }
  static geomopt::Hyperparameters hyperparameters(const Options& o) { return {{"lr", o.lr}, {"beta", o.beta}}; }
};

double kernel_example() {
  geomopt::Optimizer<SignumKernel> signum({.lr = 0.02}, {.schedule = geomopt::schedules::exponential(0.99)});
  return train(signum, 300);
}
// snippet-end: kernel

int main() {
  struct Run {
    const char* name;
    double (*run)();
  };
  const Run runs[] = {{"SGD (Nesterov)", sgd_example},  {"Adam", adam_example},       {"AdamW + EMA", adamw_example},
                      {"RMSprop", rmsprop_example},     {"Adagrad", adagrad_example}, {"Adam on St(6, 3)", manifold_example},
                      {"Signum (a kernel)", kernel_example}};
  int failures = 0;
  for (const Run& r : runs) {
    const double ratio = r.run();
    const bool ok = std::isfinite(ratio) && ratio < 0.1;
    std::printf("%-20s final loss / first loss = %.2e %s\n", r.name, ratio, ok ? "" : "  FAILED (expected < 0.1)");
    failures += ok ? 0 : 1;
  }
  return failures == 0 ? 0 : 1;
}
