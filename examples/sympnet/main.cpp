// A linear symplectic network learning the flow of coupled harmonic oscillators. Its layers alternate the unit
// triangular maps
//     up:  [q; p] -> [q + S p; p]        low:  [q; p] -> [q; p + S q]
// with S a geomopt::SymmetricMatrix leaf (the packed n(n+1)/2 free entries), and each is symplectic for every
// symmetric S: with J its Jacobian, J^T Omega J = Omega. Products of such maps reach the whole symplectic group, so
// the network can represent the exact flow of a linear Hamiltonian system, and whatever it learns is a symplectic
// map. Trained with geomopt::Adam on one-step pairs (x_t, x_t+dt) of exact trajectories, with gradients by hand
// (backpropagation through the layers, storage gradients by SymmetricMatrix::pullback, checked by
// geomopt::check_gradient at the start), it is compared with a dense linear map W trained the same way. The report
// gives the training loss, the one-step test error, the symplecticity defect |J^T Omega J - Omega|_F of each learned
// map, and the energy drift max_k |H(x_k) - H(x_0)| / H(x_0) of long rollouts: bounded for the symplectic map; for the
// free one, whose eigenvalues are off the unit circle, larger late in the rollout and as a rule growing. Exits 1 when
// one of the checked properties fails, 2 on bad arguments. docs/examples.md shows a run; CTest runs it with --quick.
//
// The training pairs carry measurement noise (--noise, default 1e-3): from exact samples of a linear flow, least
// squares recovers the flow map itself to rounding, and the dense map then drifts too slowly to matter (--noise 0
// shows it). From noisy samples its eigenvalues leave the unit circle and its energy error grows step by step.
//
//   sympnet [--d D] [--layers L] [--steps N] [--noise SIGMA] [--rollout R] [--seed S] [--quick]
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <geomopt/optimizers.hpp>
#include <geomopt/optimizers/check_gradient.hpp>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/cli.hpp"

namespace {

using Matrix = Eigen::MatrixXd;
using Vector = Eigen::VectorXd;

struct Arguments {
  Eigen::Index d = 3;   // degrees of freedom: states are [q; p] in R^(2d)
  int layers = 6;       // alternating up, low, up, ...
  int steps = 4000;     // Adam steps
  double noise = 1e-3;  // standard deviation of the measurement noise on the training pairs
  unsigned long seed = 11;
  int rollout = 1000;  // steps of the long rollout
};

Arguments parse(int argc, char** argv) {
  Arguments a;
  // --quick first, so that explicit sizes override it wherever they stand.
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--quick") {
      a.d = 2;
      a.layers = 6;
      a.steps = 800;
      a.rollout = 300;
    }
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quick") continue;
    if (flag != "--d" && flag != "--layers" && flag != "--steps" && flag != "--noise" && flag != "--rollout" &&
        flag != "--seed")
      throw std::invalid_argument("unknown argument '" + flag + "'");
    if (i + 1 == argc) throw std::invalid_argument(flag + " needs a value");
    const char* value = argv[++i];
    if (flag == "--d") a.d = geomopt::examples::parse_integer(flag, value, 1);
    if (flag == "--layers") a.layers = static_cast<int>(geomopt::examples::parse_integer(flag, value, 1));
    if (flag == "--steps") a.steps = static_cast<int>(geomopt::examples::parse_integer(flag, value, 1));
    if (flag == "--rollout") a.rollout = static_cast<int>(geomopt::examples::parse_integer(flag, value, 10));
    if (flag == "--seed") a.seed = static_cast<unsigned long>(geomopt::examples::parse_integer(flag, value, 0));
    if (flag == "--noise") a.noise = geomopt::examples::parse_real(flag, value, 0);
  }
  return a;
}

// d masses m_j = 1 + j/4 in a chain of unit springs between two walls: H = p^T M^-1 p / 2 + q^T K q / 2.
struct Oscillators {
  Vector mass;
  Matrix K;
  Matrix whiten_q, whiten_p;  // V^T M^1/2 and V^T M^-1/2: normal coordinates u = whiten_q q, w = whiten_p p
  Vector omega;               // the normal frequencies

  explicit Oscillators(Eigen::Index d) : mass(d), K(Matrix::Zero(d, d)) {
    for (Eigen::Index j = 0; j < d; ++j) {
      mass[j] = 1 + 0.25 * static_cast<double>(j);
      K(j, j) = 2;
      if (j > 0) K(j, j - 1) = K(j - 1, j) = -1;
    }
    const Vector root = mass.cwiseSqrt();
    const Eigen::SelfAdjointEigenSolver<Matrix> eig(root.cwiseInverse().asDiagonal() * K *
                                                    root.cwiseInverse().asDiagonal());
    omega = eig.eigenvalues().cwiseSqrt();
    whiten_q = eig.eigenvectors().transpose() * root.asDiagonal();
    whiten_p = eig.eigenvectors().transpose() * root.cwiseInverse().asDiagonal();
  }
  Eigen::Index d() const { return mass.size(); }

  double energy(const Vector& x) const {
    const auto q = x.head(d()), p = x.tail(d());
    return 0.5 * p.cwiseProduct(mass.cwiseInverse()).dot(p) + 0.5 * q.dot(K * q);
  }
  // The time derivative [M^-1 p; -K q], for the independent RK4 reference.
  Vector field(const Vector& x) const {
    Vector dx(2 * d());
    dx.head(d()) = x.tail(d()).cwiseQuotient(mass);
    dx.tail(d()) = -K * x.head(d());
    return dx;
  }
  // The exact flow over time t: each normal mode turns in its phase plane, u + i w / omega by angle omega t.
  Vector flow(const Vector& x, double t) const {
    const Vector u = whiten_q * x.head(d()), w = whiten_p * x.tail(d());
    const Eigen::ArrayXd c = (omega * t).array().cos(), s = (omega * t).array().sin(), o = omega.array();
    Vector out(2 * d());
    out.head(d()) = whiten_q.inverse() * (c * u.array() + s / o * w.array()).matrix();
    out.tail(d()) = whiten_p.inverse() * (-o * s * u.array() + c * w.array()).matrix();
    return out;
  }
};

// Omega = [0, I; -I, 0], and |J^T Omega J - Omega|_F.
double symplecticity_defect(const Matrix& jacobian) {
  const Eigen::Index d = jacobian.rows() / 2;
  Matrix omega = Matrix::Zero(2 * d, 2 * d);
  omega.topRightCorner(d, d).setIdentity();
  omega.bottomLeftCorner(d, d) = -Matrix::Identity(d, d);
  return (jacobian.transpose() * omega * jacobian - omega).norm();
}

// The symplectic network: layer l is "up" (q += S_l p) for even l and "low" (p += S_l q) for odd l.
// snippet-begin: model
template <class T>
struct SympNet {
  std::vector<geomopt::SymmetricMatrix<T>> S;
  GEOMOPT_PTREE(S)
};
// snippet-end: model

// The unconstrained model it is compared with: x -> W x.
template <class T>
struct DenseMap {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> W;
  GEOMOPT_PTREE(W)
};

// Applies the network to the columns of x (2d x B), in place.
void forward(const SympNet<double>& net, Matrix& x) {
  const Eigen::Index d = x.rows() / 2;
  for (std::size_t l = 0; l < net.S.size(); ++l) {
    if (l % 2 == 0)
      x.topRows(d) += net.S[l] * x.bottomRows(d);
    else
      x.bottomRows(d) += net.S[l] * x.topRows(d);
  }
}

// The mean squared one-step error (1/B) sum_b |f(x_b) - y_b|^2 and, when grads is given, its gradient with respect
// to every S_l's storage. Backward through an up layer q' = q + S p with upstream gradients (g_q, g_p): dL/dS = g_q
// p^T (pulled back to the packed storage), and g_p <- g_p + S g_q (S^T = S); a low layer mirrors it.
double loss(const SympNet<double>& net, const Matrix& x, const Matrix& y, SympNet<double>* grads) {
  const Eigen::Index d = x.rows() / 2;
  const auto batch = static_cast<double>(x.cols());
  std::vector<Matrix> inputs;  // each layer's input, for the backward pass
  Matrix z = x;
  for (std::size_t l = 0; l < net.S.size(); ++l) {
    if (grads != nullptr) inputs.push_back(z);
    if (l % 2 == 0)
      z.topRows(d) += net.S[l] * z.bottomRows(d);
    else
      z.bottomRows(d) += net.S[l] * z.topRows(d);
  }
  const Matrix residual = z - y;
  if (grads != nullptr) {
    Matrix g = residual * (2 / batch);
    for (std::size_t l = net.S.size(); l-- > 0;) {
      const Matrix& in = inputs[l];
      if (l % 2 == 0) {
        grads->S[l].storage() = net.S[l].pullback(g.topRows(d) * in.bottomRows(d).transpose());
        g.bottomRows(d) += net.S[l] * g.topRows(d);
      } else {
        grads->S[l].storage() = net.S[l].pullback(g.bottomRows(d) * in.topRows(d).transpose());
        g.topRows(d) += net.S[l] * g.bottomRows(d);
      }
    }
  }
  return residual.squaredNorm() / batch;
}

double loss(const DenseMap<double>& map, const Matrix& x, const Matrix& y, DenseMap<double>* grads) {
  const auto batch = static_cast<double>(x.cols());
  const Matrix residual = map.W * x - y;
  if (grads != nullptr) grads->W = residual * x.transpose() * (2 / batch);
  return residual.squaredNorm() / batch;
}

// The network as one matrix: its Jacobian, the same at every point since every layer is linear.
Matrix jacobian(const SympNet<double>& net, Eigen::Index d) {
  Matrix j = Matrix::Identity(2 * d, 2 * d);
  forward(net, j);
  return j;
}
Matrix jacobian(const DenseMap<double>& map, Eigen::Index) { return map.W; }

// The hand gradient of the loss on (x, y) at model, by geomopt::check_gradient in the form a stochastic optimizer's
// loss has: it writes the gradient into grads and returns the loss.
template <class Model>
geomopt::DerivativeCheck gradient_check(const Model& model, const Matrix& x, const Matrix& y) {
  return geomopt::check_gradient([&](const Model& m, Model& grads) { return loss(m, x, y, &grads); }, model);
}

struct Pairs {
  Matrix x, y;  // 2d x count: y is x advanced by one step
};

// count trajectories of `length` steps from standard normal starts, sampled by the exact flow at t = k dt.
Pairs trajectories(const Oscillators& system, geomopt::Rng& rng, int count, int length, double dt, double noise) {
  std::normal_distribution<double> normal;
  const Eigen::Index n = 2 * system.d();
  Pairs pairs{Matrix(n, count * length), Matrix(n, count * length)};
  for (int c = 0; c < count; ++c) {
    Vector x0(n);
    for (Eigen::Index i = 0; i < n; ++i) x0[i] = normal(rng);
    Vector previous = x0;
    for (int k = 0; k < length; ++k) {
      const Vector next = system.flow(x0, (k + 1) * dt);
      pairs.x.col(c * length + k) = previous;
      pairs.y.col(c * length + k) = next;
      previous = next;
    }
  }
  for (Eigen::Index i = 0; i < pairs.x.size(); ++i) {
    pairs.x(i) += noise * normal(rng);
    pairs.y(i) += noise * normal(rng);
  }
  return pairs;
}

struct Trained {
  double initial_loss, final_loss, test_error, defect, off_circle;
  double drift_early, drift, drift_late;  // max relative energy error over [0, R/10], [0, R], [9R, 10R]
};

// Trains with Adam on minibatches of 64 (cosine schedule), then measures the learned map.
template <class Model>
Trained train(Model model, const Oscillators& system, const Pairs& train_set, const Pairs& test_set,
              const Arguments& args, geomopt::Rng& rng) {
  Trained r{};
  Model grads = model;
  geomopt::Adam adam({.lr = 1e-2}, {.schedule = geomopt::schedules::cosine(args.steps, args.steps / 20)});
  auto state = adam.init(model);
  r.initial_loss = loss(model, train_set.x, train_set.y, nullptr);
  const Eigen::Index count = train_set.x.cols(), batch = std::min<Eigen::Index>(64, count);
  std::vector<Eigen::Index> order(static_cast<std::size_t>(count));
  std::iota(order.begin(), order.end(), Eigen::Index{0});
  Matrix bx(train_set.x.rows(), batch), by(train_set.x.rows(), batch);
  Eigen::Index next = count;
  for (int t = 0; t < args.steps; ++t) {
    for (Eigen::Index b = 0; b < batch; ++b) {
      if (next == count) {  // a new epoch
        std::shuffle(order.begin(), order.end(), rng);
        next = 0;
      }
      bx.col(b) = train_set.x.col(order[static_cast<std::size_t>(next)]);
      by.col(b) = train_set.y.col(order[static_cast<std::size_t>(next++)]);
    }
    loss(model, bx, by, &grads);
    adam.step(model, grads, state);
  }
  r.final_loss = loss(model, train_set.x, train_set.y, nullptr);
  const Matrix map = jacobian(model, system.d());
  r.test_error = std::sqrt((map * test_set.x - test_set.y).squaredNorm() / test_set.y.squaredNorm());
  r.defect = symplecticity_defect(map);
  // A symplectic map near the flow keeps the flow's simple eigenvalues e^(+-i omega dt) on the unit circle; a map
  // with an eigenvalue off it scales that mode's energy by |lambda|^2 at every step.
  r.off_circle = (Eigen::EigenSolver<Matrix>(map).eigenvalues().array().abs() - 1).abs().maxCoeff();

  // Rollouts from the test trajectories' starts, ten times the requested length.
  const int length = 10 * args.rollout;
  for (Eigen::Index c = 0; c < std::min<Eigen::Index>(test_set.x.cols(), 5); ++c) {
    Vector x = test_set.x.col(c);
    const double h0 = system.energy(x);
    for (int k = 1; k <= length; ++k) {
      x = map * x;
      const double error = std::abs(system.energy(x) - h0) / h0;
      if (k <= args.rollout / 10) r.drift_early = std::max(r.drift_early, error);
      if (k <= args.rollout) r.drift = std::max(r.drift, error);
      if (k > length - args.rollout) r.drift_late = std::max(r.drift_late, error);
    }
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Arguments args;
  try {
    args = parse(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr,
                 "sympnet: %s\nusage: sympnet [--d D] [--layers L] [--steps N] [--noise SIGMA] "
                 "[--rollout R] [--seed S] [--quick]\n",
                 e.what());
    return 2;
  }
  const Eigen::Index d = args.d;
  const double dt = 0.1;
  geomopt::Rng rng(args.seed);
  const Oscillators system(d);
  bool passed = true;
  auto require = [&](bool ok, const char* what) {
    if (!ok) std::printf("FAILED: %s\n", what);
    passed = passed && ok;
  };

  // The data generator against an independent reference: RK4 with 100 substeps per step, and energy conservation.
  {
    Vector x0 = Vector::LinSpaced(2 * d, 1, -1), x = x0;
    const double h = dt / 100;
    for (int k = 0; k < 100 * 20; ++k) {
      const Vector k1 = system.field(x), k2 = system.field(x + h / 2 * k1), k3 = system.field(x + h / 2 * k2),
                   k4 = system.field(x + h * k3);
      x += h / 6 * (k1 + 2 * k2 + 2 * k3 + k4);
    }
    const Vector exact = system.flow(x0, 20 * dt);
    const double rk4_error = (x - exact).norm() / x0.norm();
    const double energy_error = std::abs(system.energy(exact) - system.energy(x0)) / system.energy(x0);
    std::printf("%td coupled oscillators, masses %.2f..%.2f, frequencies %.4f..%.4f, dt = %.2f\n", d, system.mass[0],
                system.mass[d - 1], system.omega.minCoeff(), system.omega.maxCoeff(), dt);
    std::printf("exact flow over 20 steps: against RK4 %.1e, energy error %.1e\n", rk4_error, energy_error);
    require(rk4_error < 1e-10 && energy_error < 1e-12, "the closed-form flow disagrees with RK4 or energy");
  }

  const Pairs train_set = trajectories(system, rng, 20, 50, dt, args.noise);
  const Pairs test_set = trajectories(system, rng, 10, 20, dt, 0);
  std::printf("training pairs %td (noise %.1e), test pairs %td, %d Adam steps\n\n", train_set.x.cols(), args.noise,
              test_set.x.cols(), args.steps);

  // Both models start near the identity map.
  std::normal_distribution<double> small(0, 1e-2);
  SympNet<double> net;
  for (int l = 0; l < args.layers; ++l) {
    Matrix s(d, d);
    for (Eigen::Index i = 0; i < s.size(); ++i) s(i) = small(rng);
    net.S.push_back(geomopt::SymmetricMatrix<double>::from_dense(s));
  }
  DenseMap<double> dense{Matrix::Identity(2 * d, 2 * d)};
  for (Eigen::Index i = 0; i < dense.W.size(); ++i) dense.W(i) += small(rng);

  const Matrix check_x = train_set.x.leftCols(32), check_y = train_set.y.leftCols(32);
  const geomopt::DerivativeCheck net_check = gradient_check(net, check_x, check_y);
  const geomopt::DerivativeCheck dense_check = gradient_check(dense, check_x, check_y);
  std::printf("SympNet: %s\ndense W: %s\n", net_check.BriefReport().c_str(), dense_check.BriefReport().c_str());
  require(net_check.passed && dense_check.passed, "a hand gradient fails check_gradient");
  if (!net_check.passed || !dense_check.passed)
    std::printf("%s%s", net_check.FullReport().c_str(), dense_check.FullReport().c_str());

  const Trained a = train(net, system, train_set, test_set, args, rng);
  const Trained b = train(dense, system, train_set, test_set, args, rng);
  const std::string sympnet_name = "SympNet (" + std::to_string(args.layers) + " layers, " +
                                   std::to_string(static_cast<Eigen::Index>(args.layers) * d * (d + 1) / 2) +
                                   " parameters)";
  const std::string dense_name = "dense W (" + std::to_string(4 * d * d) + " parameters)";
  std::printf("\n%-44s %-30s %s\n", "", sympnet_name.c_str(), dense_name.c_str());
  auto row = [](const char* what, double x, double y) { std::printf("%-44s %-30.2e %.2e\n", what, x, y); };
  row("training loss, start", a.initial_loss, b.initial_loss);
  row("training loss, end", a.final_loss, b.final_loss);
  row("one-step test error (relative RMS)", a.test_error, b.test_error);
  row("|J^T Omega J - Omega|_F", a.defect, b.defect);
  row("max_i ||lambda_i(J)| - 1|", a.off_circle, b.off_circle);
  char label[3][64];
  std::snprintf(label[0], sizeof label[0], "energy drift, steps 1..%d", args.rollout / 10);
  std::snprintf(label[1], sizeof label[1], "energy drift, steps 1..%d", args.rollout);
  std::snprintf(label[2], sizeof label[2], "energy drift, steps %d..%d", 9 * args.rollout + 1, 10 * args.rollout);
  row(label[0], a.drift_early, b.drift_early);
  row(label[1], a.drift, b.drift);
  row(label[2], a.drift_late, b.drift_late);
  std::printf(
      "(energy drift: max_k |H(x_k) - H(x_0)| / H(x_0) over rollouts of the learned map from 5 test starts)\n\n");

  require(a.final_loss < 1e-3 * a.initial_loss && b.final_loss < 1e-3 * b.initial_loss, "training did not converge");
  require(a.test_error < 1e-2, "the SympNet's one-step test error exceeds 1e-2");
  require(a.defect < 1e-12, "the SympNet is not symplectic to rounding");
  require(a.off_circle < 1e-12, "the SympNet has an eigenvalue off the unit circle");
  // Bounded: late in a rollout ten times longer, the SympNet's energy error is no larger than twice its maximum
  // over the first R steps. Over R steps alone the comparison with the dense map depends on how well each fits
  // (the SympNet's bounded error is its fitting error, the dense map's grows from zero), so it is made late.
  require(a.drift_late < 2 * a.drift, "the SympNet's energy error grows along the rollout");
  if (args.noise > 0) {
    require(b.defect > 1e3 * a.defect, "the dense map came out symplectic: nothing to compare");
    require(a.drift_late < b.drift_late, "the SympNet's energy error exceeds the dense map's late in the rollout");
  } else {
    std::printf(
        "exact data: least squares recovers the linear flow map itself, so the dense map is compared with "
        "nothing (use --noise > 0)\n");
  }
  std::printf("%s\n", passed ? "all checks passed" : "some checks FAILED");
  return passed ? 0 : 1;
}
