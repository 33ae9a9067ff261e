// Fashion-MNIST with orthogonal weights: the same network trained by Adam with free hidden weights ("free"), with
// hidden weights on the Stiefel manifold ("stiefel": W in St(in, out), orthonormal columns, times a learned gain per
// unit), and an attention network over the image's rows whose query, key and value projections live on St(d, n)
// ("attention"). The same three networks trained by Muon ("muon": the free MLP's hidden matrices), and by manifold
// Muon ("manifold_muon": the Stiefel MLP's hidden W; "attention_muon": Wq, Wk, Wv on St(d, n) and the attention
// network's inner matrices by Muon), with AdamW (no decay, so Adam) on every other leaf. Each epoch it evaluates on
// the test set, saves an HDF5 checkpoint (--resume continues from it), and appends to a metrics CSV; at the end it
// plots loss and accuracy of every configuration with gnuplot.
//
//   fashion_mnist [--configs free,stiefel,muon] [--epochs 10] [--out DIR] [--resume] ...   (--help lists all)
//
// Before training, geomopt::check_gradient checks each network's hand-written backward pass on 16 training images.
// Exit status 1 when that check fails, when a Stiefel leaf of any configuration ends farther than 1e-5 from its
// manifold (check(W) = |W^T W - I|_F) or when the stiefel configuration's final test accuracy is below
// --min-accuracy; 2 on bad arguments or data.
//
// Built with geomopt::distributed (MPI found) and launched by mpirun at P > 1 ranks, it trains data-parallel, every
// rank the same model on its slice of each global batch (see "Data parallelism" below); rank 0 prints and writes.
//
//   mpirun -np 2 fashion_mnist [options]
#include <unistd.h>

#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <geomopt/io.hpp>
#include <geomopt/optimizers.hpp>
#include <geomopt/optimizers/check_gradient.hpp>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "../common/cli.hpp"
#include "../nn/idx.hpp"
#include "../nn/layers.hpp"

#ifdef GEOMOPT_EXAMPLE_MPI
#include <geomopt/distributed.hpp>
#endif

namespace fs = std::filesystem;
using geomopt::examples::Mat;
using geomopt::examples::Vec;
using MatF = Mat<float>;
using VecF = Vec<float>;

namespace {

constexpr int kClasses = 10;
constexpr int kSide = 28;  // images are kSide x kSide; the attention network reads them as kSide row tokens
// Fashion-MNIST's training-set pixel mean and standard deviation (of pixel / 255), for input standardisation.
constexpr float kPixelMean = 0.2860f, kPixelStd = 0.3530f;

// ---------------------------------------------------------------------------------------------------------------
// Models

struct FreeDense {
  MatF W;  // in x out: y = W^T x + b
  VecF b;
  GEOMOPT_PTREE(W, b)
};

// y = diag(gain) W^T x + b with W in St(in, out): the directions are orthonormal, the gain sets each unit's scale.
struct StiefelDense {
  geomopt::Stiefel<float> W;
  VecF gain;
  VecF b;
  GEOMOPT_PTREE(W, gain, b)
};

template <class Layer>
struct Mlp {
  std::vector<Layer> hidden;
  FreeDense head;
  GEOMOPT_PTREE(hidden, head)
};

// The image as T tokens (its 7 x 7 patches of 4 x 4 pixels, or its 28 rows): h_t = E^T x_t + p_t (d x T),
// single-head attention with projections in St(d, n), o = h + Wo^T z + bo, a token-wise ReLU layer
// u = relu(F^T o + c), mean over tokens, linear head.
struct AttentionNet {
  MatF embed;  // width x d
  MatF pos;    // d x T
  geomopt::Stiefel<float> Wq, Wk, Wv;
  FreeDense out;  // n x d
  FreeDense ffn;  // d x f
  FreeDense head;
  GEOMOPT_PTREE(embed, pos, Wq, Wk, Wv, out, ffn, head)
  Eigen::MatrixXi pixel;  // width x T: the pixel index of feature f of token t; fixed, not a parameter
};

const MatF& weight(const FreeDense& l) { return l.W; }
const MatF& weight(const StiefelDense& l) { return l.W.value(); }
const VecF& gain(const FreeDense&) {
  static const VecF none;
  return none;
}
const VecF& gain(const StiefelDense& l) { return l.gain; }

MatF gaussian(geomopt::Rng& rng, Eigen::Index rows, Eigen::Index cols, float stddev) {
  std::normal_distribution<float> normal(0.0f, stddev);
  MatF m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m(i) = normal(rng);
  return m;
}

// He initialisation for the free layers; the Stiefel layers start Haar-distributed with gain sqrt(2), the column norm
// He's initialisation has in expectation.
FreeDense make_free(geomopt::Rng& rng, Eigen::Index in, Eigen::Index out) {
  return {gaussian(rng, in, out, std::sqrt(2.0f / static_cast<float>(in))), VecF::Zero(out)};
}
StiefelDense make_stiefel(geomopt::Rng& rng, Eigen::Index in, Eigen::Index out) {
  return {geomopt::Stiefel<float>::random_point(rng, in, out), VecF::Constant(out, std::sqrt(2.0f)), VecF::Zero(out)};
}

template <class Layer>
Mlp<Layer> make_mlp(geomopt::Rng& rng, const std::vector<Eigen::Index>& hidden) {
  Mlp<Layer> m;
  Eigen::Index in = kSide * kSide;
  for (Eigen::Index width : hidden) {
    if constexpr (std::is_same_v<Layer, StiefelDense>)
      m.hidden.push_back(make_stiefel(rng, in, width));
    else
      m.hidden.push_back(make_free(rng, in, width));
    in = width;
  }
  m.head = make_free(rng, in, kClasses);
  m.head.W *= std::sqrt(0.5f);  // no ReLU after the head: Glorot-like scale
  return m;
}

AttentionNet make_attention(geomopt::Rng& rng, Eigen::Index d, Eigen::Index n, bool patches) {
  AttentionNet a;
  const int patch = 4, grid = kSide / patch;
  const Eigen::Index width = patches ? patch * patch : kSide, T = patches ? grid * grid : kSide;
  Eigen::MatrixXi pixel(width, T);
  for (Eigen::Index t = 0; t < T; ++t)
    for (Eigen::Index f = 0; f < width; ++f)
      pixel(f, t) = patches
                        ? static_cast<int>(((t / grid) * patch + f / patch) * kSide + (t % grid) * patch + f % patch)
                        : static_cast<int>(t * kSide + f);
  a.pixel = pixel;
  a.embed = gaussian(rng, width, d, 1.0f / std::sqrt(static_cast<float>(width)));
  a.pos = gaussian(rng, d, T, 0.1f);
  a.Wq = geomopt::Stiefel<float>::random_point(rng, d, n);
  a.Wk = geomopt::Stiefel<float>::random_point(rng, d, n);
  a.Wv = geomopt::Stiefel<float>::random_point(rng, d, n);
  a.out = make_free(rng, n, d);
  a.ffn = make_free(rng, d, 2 * d);
  a.head = make_free(rng, 2 * d, kClasses);
  return a;
}

// ---------------------------------------------------------------------------------------------------------------
// Forward and backward passes. `grads` has the model's type; every leaf is overwritten.

struct BatchResult {
  double loss = 0;
  std::int64_t correct = 0;
};

template <class Layer>
BatchResult run_batch(const Mlp<Layer>& m, const MatF& x, std::span<const std::uint8_t> labels, Mlp<Layer>* grads) {
  using namespace geomopt::examples;
  const std::size_t L = m.hidden.size();
  std::vector<MatF> acts(L + 1), pres(L + 1);
  acts[0] = x;
  for (std::size_t l = 0; l < L; ++l) {
    dense_forward(weight(m.hidden[l]), gain(m.hidden[l]), m.hidden[l].b, acts[l], pres[l], acts[l + 1]);
    relu_forward(acts[l + 1]);
  }
  MatF logits, head_pre, dlogits;
  dense_forward(m.head.W, VecF(), m.head.b, acts[L], head_pre, logits);
  BatchResult r;
  r.loss = softmax_cross_entropy(logits, labels, dlogits, r.correct);
  if (!grads) return r;

  VecF unused;
  MatF d;
  dense_backward(m.head.W, VecF(), acts[L], head_pre, dlogits, grads->head.W, unused, grads->head.b, &d);
  for (std::size_t l = L; l-- > 0;) {
    relu_backward(acts[l + 1], d);
    MatF dx;
    auto& g = grads->hidden[l];
    if constexpr (std::is_same_v<Layer, StiefelDense>)
      dense_backward(weight(m.hidden[l]), m.hidden[l].gain, acts[l], pres[l], d, g.W.value(), g.gain, g.b,
                     l > 0 ? &dx : nullptr);
    else
      dense_backward(m.hidden[l].W, VecF(), acts[l], pres[l], d, g.W, unused, g.b, l > 0 ? &dx : nullptr);
    d = std::move(dx);
  }
  return r;
}

BatchResult run_batch(const AttentionNet& m, const MatF& x, std::span<const std::uint8_t> labels, AttentionNet* grads) {
  using namespace geomopt::examples;
  const Eigen::Index batch = x.cols(), T = m.pos.cols(), width = m.embed.rows();
  // Token t of sample s is column s T + t: the pixels of patch t, gathered by m.pixel.
  MatF tokens(width, T * batch);
  for (Eigen::Index s = 0; s < batch; ++s)
    for (Eigen::Index t = 0; t < T; ++t)
      for (Eigen::Index f = 0; f < width; ++f) tokens(f, s * T + t) = x(m.pixel(f, t), s);
  MatF h = m.embed.transpose() * tokens;
  for (Eigen::Index s = 0; s < batch; ++s) h.middleCols(s * T, T) += m.pos;
  AttentionCache<float> cache;
  attention_forward(m.Wq.value(), m.Wk.value(), m.Wv.value(), h, T, cache);
  MatF o_pre, o;
  dense_forward(m.out.W, VecF(), m.out.b, cache.z, o_pre, o);
  o += h;
  MatF u_pre, u;
  dense_forward(m.ffn.W, VecF(), m.ffn.b, o, u_pre, u);
  relu_forward(u);
  const MatF pooled = mean_pool(u, T);
  MatF head_pre, logits, dlogits;
  dense_forward(m.head.W, VecF(), m.head.b, pooled, head_pre, logits);
  BatchResult r;
  r.loss = softmax_cross_entropy(logits, labels, dlogits, r.correct);
  if (!grads) return r;

  VecF unused;
  MatF dpooled, dz;
  dense_backward(m.head.W, VecF(), pooled, head_pre, dlogits, grads->head.W, unused, grads->head.b, &dpooled);
  MatF du = mean_pool_backward(dpooled, T), d_o;
  relu_backward(u, du);
  dense_backward(m.ffn.W, VecF(), o, u_pre, du, grads->ffn.W, unused, grads->ffn.b, &d_o);
  dense_backward(m.out.W, VecF(), cache.z, o_pre, d_o, grads->out.W, unused, grads->out.b, &dz);
  MatF dh = attention_backward(m.Wq.value(), m.Wk.value(), m.Wv.value(), h, T, cache, dz, grads->Wq.value(),
                               grads->Wk.value(), grads->Wv.value());
  dh += d_o;  // the residual connection
  grads->embed.noalias() = tokens * dh.transpose();
  grads->pos.setZero(m.pos.rows(), m.pos.cols());
  for (Eigen::Index s = 0; s < batch; ++s) grads->pos += dh.middleCols(s * T, T);
  return r;
}

// The largest check(W) over the model's Stiefel leaves (0 when it has none).
template <class Tree>
double stiefel_defect(const Tree& model) {
  double worst = 0;
  geomopt::ptree::for_each(
      [&](const auto& leaf) {
        if constexpr (std::is_same_v<std::decay_t<decltype(leaf)>, geomopt::Stiefel<float>>)
          worst = std::max(worst, static_cast<double>(geomopt::check(leaf)));
      },
      model);
  return worst;
}

// The condition number of each hidden layer's effective weight W diag(gain): how unevenly the layer stretches its
// input directions. Orthonormal columns leave only the gains' spread.
template <class Layer>
std::vector<double> conditions(const Mlp<Layer>& m) {
  std::vector<double> out;
  for (const Layer& l : m.hidden) {
    Eigen::MatrixXd w = weight(l).template cast<double>();
    if (gain(l).size() > 0) w = w * gain(l).template cast<double>().asDiagonal();
    // The singular values of w are the square roots of the eigenvalues of w^T w (ascending), computed in double.
    const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(w.transpose() * w, Eigen::EigenvaluesOnly);
    const auto& e = eig.eigenvalues();
    out.push_back(std::sqrt(e(e.size() - 1) / e(0)));
  }
  return out;
}
std::vector<double> conditions(const AttentionNet&) { return {}; }

// ---------------------------------------------------------------------------------------------------------------
// Data parallelism
//
// The program is data-parallel whenever it runs at P > 1 ranks, with no flag: mpirun -np P is the request, and P
// copies each training the whole model alone would only write the same files at once. Every rank builds the same
// model from the same seed and shuffles by the same seed, so all ranks agree on each global batch of --batch images;
// rank r takes its contiguous slice [r m / P, (r + 1) m / P) of a batch of m, GradientAverager makes every rank's
// gradient the same mean, bit for bit, and every rank takes the same step, so the models never drift apart and are
// never sent. Each rank evaluates a contiguous slice of the test set; the sums are added over the ranks. Rank 0
// prints and writes the checkpoints, the CSV and the plot. At P = 1, and in a build without MPI, none of this runs.

// The ranks: this process's rank and their number, and sums over them. Without MPI, one rank. With MPI, it
// initialises MPI and finalises it after its Communicator is gone.
class World {
 public:
#ifdef GEOMOPT_EXAMPLE_MPI
  World(int* argc, char*** argv) : mpi_(argc, argv), comm_(MPI_COMM_WORLD) {}
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  const geomopt::distributed::Communicator& comm() const { return comm_; }
  // Every rank's values summed entry by entry, on every rank.
  void sum(std::span<double> values) const {
    if (size() > 1)
      MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  }
  // Every rank's value, in rank order, on every rank.
  std::vector<std::int64_t> gather(std::int64_t value) const {
    std::vector<std::int64_t> all(static_cast<std::size_t>(size()), value);
    if (size() > 1) MPI_Allgather(&value, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
    return all;
  }
  // After an error on this rank: the others may be waiting for it in a collective call, so the job ends here.
  void abort_job(int status) const {
    if (size() > 1) MPI_Abort(MPI_COMM_WORLD, status);
  }

 private:
  struct Mpi {
    Mpi(int* argc, char*** argv) { MPI_Init(argc, argv); }
    ~Mpi() { MPI_Finalize(); }
    Mpi(const Mpi&) = delete;
    Mpi& operator=(const Mpi&) = delete;
  } mpi_;
  geomopt::distributed::Communicator comm_;
#else
  World(int*, char***) {}
  int rank() const { return 0; }
  int size() const { return 1; }
  void sum(std::span<double>) const {}
  std::vector<std::int64_t> gather(std::int64_t value) const { return {value}; }
  void abort_job(int) const {}
#endif
 public:
  bool writes() const { return rank() == 0; }
  // This rank's contiguous slice [first, first + count) of `n` items that start at `begin`.
  std::pair<Eigen::Index, Eigen::Index> slice(Eigen::Index begin, Eigen::Index n) const {
    const Eigen::Index first = n * rank() / size(), last = n * (rank() + 1) / size();
    return {begin + first, last - first};
  }
};

// The gradient of the global batch from each rank's gradient of its slice, on every rank alike (nothing at P = 1).
template <class Model>
class BatchGradient {
 public:
  BatchGradient(const World& world, const Model& grads) : size_(world.size()) {
#ifdef GEOMOPT_EXAMPLE_MPI
    if (size_ > 1) averager_.emplace(world.comm(), grads);
#else
    (void)grads;
#endif
  }

  // `grads` holds the mean gradient over this rank's `count` samples of a global batch of `m` (anything when count
  // is 0) and leaves with the mean over the global batch. GradientAverager takes the plain mean of the P ranks'
  // trees, which is the batch mean only when every slice has m / P samples; a batch that P does not divide (an odd
  // --batch at P = 2, or the last, smaller batch) gives slices that differ by one, and empty ones when m < P. So each
  // rank first scales its slice mean by count P / m, making it P / m times its slice's sum; the mean of those over
  // the ranks is the sum over the whole batch divided by m, whatever the slices' sizes.
  void reduce(Model& grads, Eigen::Index count, Eigen::Index m) {
    if (size_ == 1) return;
    if (count == 0) {
      grads = geomopt::ptree::zeros_like(grads);
    } else {
      const auto weight = static_cast<float>(static_cast<double>(count) * size_ / static_cast<double>(m));
      geomopt::ptree::for_each_storage([weight](auto& block) { block *= weight; }, grads);
    }
#ifdef GEOMOPT_EXAMPLE_MPI
    averager_->average(grads);
#endif
  }

 private:
  int size_;
#ifdef GEOMOPT_EXAMPLE_MPI
  std::optional<geomopt::distributed::GradientAverager<Model>> averager_;
#endif
};

// ---------------------------------------------------------------------------------------------------------------
// Data

struct Split {
  MatF x;  // 784 x count, standardised
  std::vector<std::uint8_t> y;
};

Split load_split(const fs::path& dir, const char* prefix, std::int64_t limit) {
  const auto pair = geomopt::examples::read_idx_pair(dir / (std::string(prefix) + "-images-idx3-ubyte.gz"),
                                                     dir / (std::string(prefix) + "-labels-idx1-ubyte.gz"), kClasses);
  if (pair.images.rows != kSide || pair.images.cols != kSide)
    throw geomopt::examples::IdxError(dir.string() + "/" + prefix + "-images: images of " +
                                      std::to_string(pair.images.rows) + " x " + std::to_string(pair.images.cols) +
                                      ", expected 28 x 28");
  const std::int64_t count = limit > 0 ? std::min(limit, pair.images.count) : pair.images.count;
  Split s{MatF(kSide * kSide, count), {pair.labels.labels.begin(), pair.labels.labels.begin() + count}};
  const auto pixels = Eigen::Map<const Eigen::Matrix<std::uint8_t, Eigen::Dynamic, Eigen::Dynamic>>(
      pair.images.pixels.data(), kSide * kSide, count);
  s.x = ((pixels.cast<float>().array() / 255.0f - kPixelMean) / kPixelStd).matrix();
  return s;
}

// ---------------------------------------------------------------------------------------------------------------
// Options

// A configuration: a network and the optimizer that trains it.
enum class Network { free_mlp, stiefel_mlp, attention };
enum class Method { adam, muon, manifold_muon };
struct Config {
  std::string_view name;
  Network network;
  Method method;
};
constexpr Config kConfigs[] = {
    {"free", Network::free_mlp, Method::adam},
    {"stiefel", Network::stiefel_mlp, Method::adam},
    {"attention", Network::attention, Method::adam},
    {"muon", Network::free_mlp, Method::muon},
    {"manifold_muon", Network::stiefel_mlp, Method::manifold_muon},
    {"attention_muon", Network::attention, Method::manifold_muon},
};

const Config* find_config(std::string_view name) {
  for (const Config& c : kConfigs)
    if (c.name == name) return &c;
  return nullptr;
}

struct Options {
  std::vector<std::string> configs{"free", "stiefel", "attention", "muon", "manifold_muon", "attention_muon"};
  std::vector<Eigen::Index> hidden{128, 64};
  Eigen::Index attn_dim = 64, attn_proj = 32;
  bool patches = false;  // the attention network's tokens: 4 x 4 patches, or rows
  int epochs = 10;
  int stop_after = 0;  // 0: run every epoch
  Eigen::Index batch = 256;
  double lr = 2e-3;
  double stiefel_lr_scale = 0.5;
  double muon_lr = 0.02;             // Muon's spectral step on Euclidean matrices (tuned: docs/examples.md)
  double manifold_muon_lr = 0.02;    // ManifoldMuon's spectral step length on Stiefel leaves (tuned likewise)
  int manifold_muon_iterations = 1;  // multiplier updates per step, warm-started; 0: every step solved cold
  std::int64_t train_limit = 0, test_limit = 0;
  int threads = 1;
  std::uint64_t seed = 1;
  double min_accuracy = 0;
  bool resume = false;
  fs::path data = "/usr/share/datasets/fashion-mnist";
  fs::path out = "fashion_mnist_out";
};

[[noreturn]] void usage(int status) {
  std::printf(
      "usage: fashion_mnist [options]\n"
      "  --configs LIST       free, stiefel, attention, muon, manifold_muon, attention_muon (comma separated;\n"
      "                       default all six)\n"
      "  --hidden H1,H2,...   hidden widths of the MLPs (default 128,64)\n"
      "  --attention D,N      token width d and projection width n of the attention network (default 64,32)\n"
      "  --tokens KIND        the attention network's tokens: rows (28, default) or patches (49 of 4 x 4)\n"
      "  --epochs E           epochs per configuration (default 10)\n"
      "  --batch B            minibatch size (default 256)\n"
      "  --lr LR              Adam's learning rate (and AdamW's beside Muon), cosine-annealed to 0 (default 2e-3)\n"
      "  --stiefel-lr-scale S learning-rate factor of Adam's Stiefel leaves (default 0.5)\n"
      "  --muon-lr LR         Muon's learning rate on Euclidean matrices, cosine-annealed (default 0.02)\n"
      "  --manifold-muon-lr LR ManifoldMuon's step length on Stiefel leaves, cosine-annealed (default 0.02)\n"
      "  --manifold-muon-iterations K  ManifoldMuon's multiplier updates per step, warm-started from the previous\n"
      "                       step (default 1); 0 solves every step from a cold start to its tolerance\n"
      "  --train-limit N      use the first N training images (default all 60000)\n"
      "  --test-limit N       use the first N test images (default all 10000)\n"
      "  --threads T          threads of the optimizer step (default 1)\n"
      "  --seed S             initialisation and shuffling seed (default 1)\n"
      "  --min-accuracy P     exit 1 when the stiefel configuration ends below P %% test accuracy\n"
      "  --data DIR           the four IDX files (default /usr/share/datasets/fashion-mnist)\n"
      "  --out DIR            checkpoints, metrics.csv and fashion_mnist.png (default fashion_mnist_out)\n"
      "  --resume             continue each configuration from its checkpoint in --out\n"
      "  --stop-after K       stop after epoch K, as an interrupted run would (continue with --resume)\n");
  std::exit(status);
}

template <class T>
std::vector<T> parse_list(const std::string& text, const std::string& flag) {
  std::vector<T> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if constexpr (std::is_same_v<T, std::string>) {
      out.push_back(item);
    } else {
      out.push_back(static_cast<T>(geomopt::examples::parse_integer(flag, item.c_str(), 1)));
    }
  }
  if (out.empty()) throw std::invalid_argument(flag + ": expected a comma-separated list, got '" + text + "'");
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + ": missing value");
      return argv[++i];
    };
    auto integer = [&](long min) { return geomopt::examples::parse_integer(a, value().c_str(), min); };
    auto real = [&](double min) { return geomopt::examples::parse_real(a, value().c_str(), min); };
    if (a == "--help" || a == "-h")
      usage(0);
    else if (a == "--configs")
      o.configs = parse_list<std::string>(value(), a);
    else if (a == "--hidden")
      o.hidden = parse_list<Eigen::Index>(value(), a);
    else if (a == "--attention") {
      const auto v = parse_list<Eigen::Index>(value(), a);
      if (v.size() != 2 || v[1] > v[0]) throw std::invalid_argument("--attention: expected D,N with N <= D");
      o.attn_dim = v[0], o.attn_proj = v[1];
    } else if (a == "--epochs")
      o.epochs = static_cast<int>(integer(1));
    else if (a == "--batch")
      o.batch = static_cast<Eigen::Index>(integer(1));
    else if (a == "--lr")
      o.lr = real(0);
    else if (a == "--stiefel-lr-scale")
      o.stiefel_lr_scale = real(0);
    else if (a == "--muon-lr")
      o.muon_lr = real(1e-12);
    else if (a == "--manifold-muon-lr")
      o.manifold_muon_lr = real(1e-12);
    else if (a == "--manifold-muon-iterations")
      o.manifold_muon_iterations = static_cast<int>(integer(0));
    else if (a == "--train-limit")
      o.train_limit = integer(1);
    else if (a == "--test-limit")
      o.test_limit = integer(1);
    else if (a == "--threads")
      o.threads = static_cast<int>(integer(1));
    else if (a == "--seed")
      o.seed = static_cast<std::uint64_t>(integer(0));
    else if (a == "--min-accuracy")
      o.min_accuracy = real(0);
    else if (a == "--data")
      o.data = value();
    else if (a == "--out")
      o.out = value();
    else if (a == "--resume")
      o.resume = true;
    else if (a == "--tokens") {
      const std::string v = value();
      if (v != "patches" && v != "rows")
        throw std::invalid_argument("--tokens: expected patches or rows, got '" + v + "'");
      o.patches = v == "patches";
    } else if (a == "--stop-after")
      o.stop_after = static_cast<int>(integer(1));
    else
      throw std::invalid_argument("unknown option '" + a + "' (--help lists them)");
  }
  for (const auto& c : o.configs)
    if (find_config(c) == nullptr)
      throw std::invalid_argument("--configs: unknown configuration '" + c +
                                  "' (free, stiefel, attention, muon, manifold_muon, attention_muon)");
  return o;
}

// ---------------------------------------------------------------------------------------------------------------
// Metrics: one CSV row per configuration and epoch, kept across --resume.

struct Row {
  std::string config;
  int epoch = 0;
  std::int64_t step = 0;
  double train_loss = 0, train_acc = 0, test_loss = 0, test_acc = 0, train_seconds = 0, samples_per_second = 0,
         defect = 0;
};

constexpr const char* kCsvHeader =
    "config,epoch,step,train_loss,train_accuracy,test_loss,test_accuracy,train_seconds,samples_per_second,"
    "stiefel_defect";

std::vector<Row> read_rows(const fs::path& file) {
  std::vector<Row> rows;
  std::ifstream in(file);
  std::string line;
  if (!std::getline(in, line) || line != kCsvHeader) return rows;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    Row r;
    std::string field;
    std::vector<std::string> f;
    while (std::getline(ss, field, ',')) f.push_back(field);
    if (f.size() != 10) continue;
    r.config = f[0];
    r.epoch = std::stoi(f[1]);
    r.step = std::stoll(f[2]);
    r.train_loss = std::stod(f[3]), r.train_acc = std::stod(f[4]), r.test_loss = std::stod(f[5]);
    r.test_acc = std::stod(f[6]), r.train_seconds = std::stod(f[7]), r.samples_per_second = std::stod(f[8]);
    r.defect = std::stod(f[9]);
    rows.push_back(r);
  }
  return rows;
}

// Written to a temporary file and renamed, so an interrupted run never leaves a half-written CSV.
void write_rows(const fs::path& file, const std::vector<Row>& rows) {
  const fs::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << kCsvHeader << "\n";
    char buffer[256];
    for (const Row& r : rows) {
      std::snprintf(buffer, sizeof buffer, "%s,%d,%lld,%.6f,%.4f,%.6f,%.4f,%.2f,%.0f,%.3g\n", r.config.c_str(), r.epoch,
                    static_cast<long long>(r.step), r.train_loss, r.train_acc, r.test_loss, r.test_acc, r.train_seconds,
                    r.samples_per_second, r.defect);
      out << buffer;
    }
    if (!out) throw std::runtime_error(tmp.string() + ": cannot be written");
  }
  fs::rename(tmp, file);
}

// gnuplot draws test accuracy and training loss against epochs for every configuration. Returns the PNG's path, or
// nothing when gnuplot is missing or fails.
std::optional<fs::path> plot(const fs::path& dir, const std::vector<Row>& rows,
                             const std::vector<std::string>& configs) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) return std::nullopt;
  std::vector<std::string> plotted;
  for (const auto& c : configs) {
    std::ofstream dat(dir / (c + ".dat"));
    bool any = false;
    for (const Row& r : rows)
      if (r.config == c) {
        dat << r.epoch << " " << r.train_loss << " " << r.test_loss << " " << r.test_acc << "\n";
        any = true;
      }
    if (any) plotted.push_back(c);
  }
  if (plotted.empty()) return std::nullopt;
  const fs::path png = dir / "fashion_mnist.png";
  std::ofstream gp(dir / "plot.gp");
  // noenhanced: the configurations' underscores are not subscripts. The loss panel's key (two lines a
  // configuration) goes in two columns below the curves.
  gp << "set terminal pngcairo noenhanced size 1300,560 font ',11'\nset output '" << png.string() << "'\n"
     << "set multiplot layout 1,2 title 'Fashion-MNIST, Adam and Muon (geomopt)'\nset grid\nset key bottom right\n"
     << "set xlabel 'epoch'\nset ylabel 'test accuracy (%)'\nplot ";
  for (std::size_t i = 0; i < plotted.size(); ++i)
    gp << (i ? ", " : "") << "'" << (dir / (plotted[i] + ".dat")).string()
       << "' using 1:4 with linespoints lw 2 title '" << plotted[i] << "'";
  gp << "\nset key bottom left maxrows " << plotted.size() << " font ',9'\nset ylabel 'loss'\nset logscale y\nplot ";
  for (std::size_t i = 0; i < plotted.size(); ++i) {
    const std::string dat = (dir / (plotted[i] + ".dat")).string();
    gp << (i ? ", " : "") << "'" << dat << "' using 1:2 with linespoints lw 2 lc " << i + 1 << " title '" << plotted[i]
       << " train', '" << dat << "' using 1:3 with lines dt 2 lw 2 lc " << i + 1 << " title '" << plotted[i]
       << " test'";
  }
  gp << "\nunset multiplot\n";
  gp.close();
  const std::string cmd = "gnuplot '" + (dir / "plot.gp").string() + "' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0 || !fs::exists(png)) return std::nullopt;
  return png;
}

// ---------------------------------------------------------------------------------------------------------------
// Training

struct Progress {
  bool tty = isatty(STDOUT_FILENO) != 0;
  std::chrono::steady_clock::time_point last{};

  void update(const std::string& config, int epoch, int epochs, std::int64_t batch, std::int64_t batches, double loss,
              double acc, double rate) {
    if (!tty) return;
    const auto now = std::chrono::steady_clock::now();
    if (batch + 1 < batches && now - last < std::chrono::milliseconds(200)) return;
    last = now;
    std::printf("\r  [%s] epoch %d/%d  batch %lld/%lld  loss %.4f  acc %.2f%%  %.0f samples/s   ", config.c_str(),
                epoch, epochs, static_cast<long long>(batch + 1), static_cast<long long>(batches), loss, acc, rate);
    std::fflush(stdout);
  }
  void done() {
    if (tty) std::printf("\r%*s\r", 100, "");
  }
};

// The mean loss and the correct count over `data`, each rank evaluating its slice of it.
template <class Model>
BatchResult evaluate(const Model& model, const Split& data, const World& world) {
  BatchResult total;
  const Eigen::Index n = data.x.cols(), chunk = 1000;
  const auto [first, count] = world.slice(0, n);
  for (Eigen::Index start = first; start < first + count; start += chunk) {
    const Eigen::Index m = std::min(chunk, first + count - start);
    const MatF x = data.x.middleCols(start, m);
    const BatchResult r =
        run_batch(model, x, std::span(data.y).subspan(static_cast<std::size_t>(start), static_cast<std::size_t>(m)),
                  static_cast<Model*>(nullptr));
    total.loss += r.loss * static_cast<double>(m);
    total.correct += r.correct;
  }
  double sums[] = {total.loss, static_cast<double>(total.correct)};
  world.sum(sums);
  total.loss = sums[0] / static_cast<double>(n);
  total.correct = static_cast<std::int64_t>(sums[1]);
  return total;
}

struct Outcome {
  double test_acc = 0, train_seconds = 0, defect = 0;
  bool has_stiefel = false;  // the network has Stiefel leaves: check(W) is reported and bounded
  std::vector<double> conditions;
  bool gradient_passed = true;  // check_gradient passed the backward pass at the start
};

// The backward pass against the loss's values on the first 16 training images, at the network's start, by
// geomopt::check_gradient in the form of a stochastic optimizer's loss (it writes the gradient, returns the loss).
// In float the steps of the Taylor remainder that rise above the rounding (about 1e-3 and up) cross the ReLU units'
// kinks, where the loss is not twice differentiable: its slope comes out anywhere from 1.4 to 3 (measured on 1 to 16
// images), so it is reported but not judged. The leaves' central differences are judged; a kink between their steps
// shows as noise, which the check allows for.
template <class Model>
bool check_backward(const std::string& config, const Model& model, const Split& train_set) {
  const Eigen::Index n = std::min<Eigen::Index>(16, train_set.x.cols());
  const MatF x = train_set.x.leftCols(n);
  const std::span<const std::uint8_t> labels(train_set.y.data(), static_cast<std::size_t>(n));
  geomopt::DerivativeCheckOptions options;
  options.judge_slope = false;
  const geomopt::DerivativeCheck check = geomopt::check_gradient(
      [&](const Model& m, Model& grads) { return run_batch(m, x, labels, &grads).loss; }, model, options);
  std::printf("  [%s] %s\n", config.c_str(), check.BriefReport().c_str());
  if (!check.passed) std::printf("%s\n", check.FullReport().c_str());
  return check.passed;
}

// Stiefel dimensions of a tree (0: no Stiefel leaf).
template <class Tree>
std::int64_t stiefel_dimension(const Tree& model) {
  std::int64_t k = 0;
  geomopt::ptree::for_each(
      [&](const auto& leaf) {
        if constexpr (std::is_same_v<std::decay_t<decltype(leaf)>, geomopt::Stiefel<float>>) k += geomopt::dim(leaf);
      },
      model);
  return k;
}

// Cosine annealing over the whole run with a short warm-up, shared by every learning rate of the optimizer (Muon's
// and its AdamW's alike); a pure function of the step, so a resumed run follows the same schedule.
geomopt::CommonOptions common_options(const Options& o, Eigen::Index train_size) {
  const std::int64_t total_steps = (train_size + o.batch - 1) / o.batch * o.epochs;
  return {.schedule = geomopt::schedules::cosine(total_steps, std::min<std::int64_t>(200, total_steps / 10)),
          .threads = o.threads};
}

// The per-leaf options of a configuration. Adam: the Stiefel leaves at stiefel_lr_scale. Muon and ManifoldMuon:
// the output head, the token embedding and the positional table stay on AdamW, as in the Muon literature (their
// gradients are not matrices of a hidden linear map, and Muon's spectral step does not suit them); every other
// matrix, Stiefel leaves included for ManifoldMuon, takes Muon's step. Muon's options hold one lr, the Stiefel
// leaves' for ManifoldMuon, so its Euclidean matrices get the ratio of the two as lr_scale.
geomopt::LeafRule leaf_rule(const Config& c, const Options& o) {
  return [c, stiefel_lr_scale = o.stiefel_lr_scale,
          euclidean_scale = o.muon_lr / o.manifold_muon_lr](const geomopt::ptree::Path& path) {
    const std::string p = path.str();
    const bool on_stiefel = c.network == Network::stiefel_mlp ? p.starts_with("hidden.") && p.ends_with(".W")
                                                              : p == "Wq" || p == "Wk" || p == "Wv";
    geomopt::LeafOptions lo;
    if (c.method == Method::adam) {
      lo.lr_scale = on_stiefel ? stiefel_lr_scale : 1.0;
    } else if (p.starts_with("head.") || p == "embed" || p == "pos") {
      lo.muon = false;
    } else if (c.method == Method::manifold_muon && !on_stiefel && p.ends_with(".W")) {
      lo.lr_scale = euclidean_scale;
    }
    return lo;
  };
}

// Muon's options for the examples: torch.optim.Muon's defaults (momentum 0.95, Nesterov, five Newton-Schulz steps),
// no weight decay, and no shape scale. The layers store W as in x out, the transpose of torch's out x in, for which
// the published scale sqrt(max(1, rows / cols)) is written: sqrt(max(1, out / in)). Both hidden layers of the MLPs
// narrow (784 -> 128 -> 64), so that is 1 for them, which MuonScale::none reproduces, where MuonScale::original on
// the stored shape would scale their steps by sqrt(in / out), 2.5 and 1.4. The attention network's two Muon matrices
// widen (out: 32 -> 64, ffn: 64 -> 128), where the published rule would give sqrt(2); none leaves them at 1 (its
// rates are untuned anyway). The fallback is AdamW without decay, that is Adam at --lr, as in the Adam
// configurations.
geomopt::MuonOptions<geomopt::AdamWKernel> muon_options(double lr, const Options& o) {
  return {.lr = lr,
          .momentum = 0.95,
          .nesterov = true,
          .ns_steps = 5,
          .weight_decay = 0,
          .scale = geomopt::MuonScale::none,
          .stiefel = o.manifold_muon_iterations > 0
                         ? geomopt::StiefelMuonOptions{.max_iterations = o.manifold_muon_iterations, .warm_start = true}
                         : geomopt::StiefelMuonOptions{},
          .fallback = {.lr = o.lr, .weight_decay = 0}};
}

template <class Model, class Optimizer>
Outcome train(const Config& c, Model model, Optimizer optimizer, const geomopt::LeafRule& rule, const Options& o,
              const Split& train_set, const Split& test_set, std::vector<Row>& rows, const fs::path& csv,
              const World& world) {
  const std::string config(c.name);
  const Eigen::Index n = train_set.x.cols();
  const std::int64_t batches = (n + o.batch - 1) / o.batch;
  auto state = optimizer.init(model, rule);
  Model grads = model;
  BatchGradient<Model> batch_gradient(world, grads);

  const fs::path checkpoint = o.out / (config + ".h5");
  int first_epoch = 1;
  double trained_seconds = 0;
  if (o.resume && fs::exists(checkpoint)) {
    const auto report = geomopt::io::load_checkpoint(checkpoint.string(), model, state);
    const auto& attrs = report.metadata.attributes;
    first_epoch = static_cast<int>(std::get<std::int64_t>(attrs.at("epoch"))) + 1;
    trained_seconds = std::get<double>(attrs.at("train_seconds"));
    std::printf("  [%s] resumed from %s after epoch %d (step %lld)\n", config.c_str(), checkpoint.c_str(),
                first_epoch - 1, static_cast<long long>(state.step_count()));
    std::erase_if(rows, [&](const Row& r) { return r.config == config && r.epoch >= first_epoch; });
  } else {
    std::erase_if(rows, [&](const Row& r) { return r.config == config; });
  }

  const std::int64_t on_stiefel = stiefel_dimension(model);
  std::string stepped;
  if constexpr (requires { state.muon_leaf_count(); })
    stepped = ", " + std::to_string(state.muon_leaf_count()) + " matrices stepped by Muon";
  std::printf("  [%s] %lld parameters (%lld on Stiefel manifolds), %s state %.1f MB%s\n", config.c_str(),
              static_cast<long long>(geomopt::ptree::layout(model).size()), static_cast<long long>(on_stiefel),
              std::string(state.optimizer()).c_str(), static_cast<double>(state.nbytes()) / 1e6, stepped.c_str());

  Progress progress;
  std::vector<Eigen::Index> order(static_cast<std::size_t>(n));
  MatF x(train_set.x.rows(), o.batch);
  std::vector<std::uint8_t> y(static_cast<std::size_t>(o.batch));
  Outcome outcome;
  const int last_epoch = o.stop_after > 0 ? std::min(o.stop_after, o.epochs) : o.epochs;
  for (int epoch = first_epoch; epoch <= last_epoch; ++epoch) {
    // The shuffle depends on the seed and the epoch only, so a resumed run sees the batches it would have seen.
    geomopt::Rng rng(o.seed * 1000003 + static_cast<std::uint64_t>(epoch));
    std::iota(order.begin(), order.end(), Eigen::Index{0});
    std::shuffle(order.begin(), order.end(), rng);
    // loss_sum and correct are over this rank's samples (local), seen over the global batches.
    double loss_sum = 0;
    std::int64_t correct = 0, local = 0, seen = 0;
    const auto start = std::chrono::steady_clock::now();
    for (std::int64_t b = 0; b < batches; ++b) {
      const Eigen::Index lo = b * o.batch, m = std::min<Eigen::Index>(o.batch, n - lo);
      const auto [first, count] = world.slice(lo, m);
      x.resize(Eigen::NoChange, count);
      y.resize(static_cast<std::size_t>(count));
      for (Eigen::Index j = 0; j < count; ++j) {
        const Eigen::Index src = order[static_cast<std::size_t>(first + j)];
        x.col(j) = train_set.x.col(src);
        y[static_cast<std::size_t>(j)] = train_set.y[static_cast<std::size_t>(src)];
      }
      const BatchResult r = count > 0 ? run_batch(model, x, y, &grads) : BatchResult{};
      batch_gradient.reduce(grads, count, m);
      optimizer.step(model, grads, state);
      loss_sum += r.loss * static_cast<double>(count);
      correct += r.correct;
      local += count;
      seen += m;
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      progress.update(config, epoch, o.epochs, b, batches,
                      loss_sum / static_cast<double>(std::max<std::int64_t>(local, 1)),
                      100.0 * static_cast<double>(correct) / static_cast<double>(std::max<std::int64_t>(local, 1)),
                      static_cast<double>(seen) / std::max(elapsed, 1e-9));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    progress.done();
    trained_seconds += seconds;
    double train_sums[] = {loss_sum, static_cast<double>(correct)};
    world.sum(train_sums);
    if (world.size() > 1) {
      std::string slices;
      for (std::int64_t s : world.gather(local)) slices += (slices.empty() ? "" : " + ") + std::to_string(s);
      std::printf("  [%s] epoch %2d: %lld samples in slices of %s over %d ranks\n", config.c_str(), epoch,
                  static_cast<long long>(seen), slices.c_str(), world.size());
    }
    const BatchResult test = evaluate(model, test_set, world);
    Row row{config,
            epoch,
            state.step_count(),
            train_sums[0] / static_cast<double>(seen),
            100.0 * train_sums[1] / static_cast<double>(seen),
            test.loss,
            100.0 * static_cast<double>(test.correct) / static_cast<double>(test_set.x.cols()),
            trained_seconds,
            static_cast<double>(seen) / seconds,
            stiefel_defect(model)};
    std::printf(
        "  [%s] epoch %2d/%d  train loss %.4f acc %.2f%%  test loss %.4f acc %.2f%%  %6.0f samples/s  "
        "%.0f s trained  defect %.1e\n",
        config.c_str(), epoch, o.epochs, row.train_loss, row.train_acc, row.test_loss, row.test_acc,
        row.samples_per_second, row.train_seconds, row.defect);
    std::fflush(stdout);
    rows.push_back(row);
    if (world.writes()) {
      write_rows(csv, rows);
      geomopt::io::save_checkpoint(checkpoint.string(), model, state,
                                   {.attributes = {{"epoch", std::int64_t{epoch}},
                                                   {"config", config},
                                                   {"train_seconds", trained_seconds},
                                                   {"test_accuracy", row.test_acc}}});
    }
    outcome = {row.test_acc, trained_seconds, row.defect, on_stiefel > 0, {}};
  }
  if (first_epoch > last_epoch) {  // everything was already trained: report the checkpoint's model
    const BatchResult test = evaluate(model, test_set, world);
    outcome = {100.0 * static_cast<double>(test.correct) / static_cast<double>(test_set.x.cols()),
               trained_seconds,
               stiefel_defect(model),
               on_stiefel > 0,
               {}};
  }
  outcome.conditions = conditions(model);
  return outcome;
}

// Trains a network by the configuration's optimizer; only the pairs kConfigs lists are instantiated.
template <class Model>
Outcome run_config(const Config& c, Model model, const Options& o, const Split& train_set, const Split& test_set,
                   std::vector<Row>& rows, const fs::path& csv, const World& world) {
  const geomopt::CommonOptions common = common_options(o, train_set.x.cols());
  const geomopt::LeafRule rule = leaf_rule(c, o);
  const bool gradient_passed = check_backward(std::string(c.name), model, train_set);
  auto go = [&](auto optimizer) {
    Outcome outcome = train(c, std::move(model), std::move(optimizer), rule, o, train_set, test_set, rows, csv, world);
    outcome.gradient_passed = gradient_passed;
    return outcome;
  };
  if (c.method == Method::adam) return go(geomopt::Adam({.lr = o.lr}, common));
  if constexpr (std::is_same_v<Model, Mlp<FreeDense>>) {
    if (c.method == Method::muon) return go(geomopt::Muon(muon_options(o.muon_lr, o), common));
  } else {
    if (c.method == Method::manifold_muon)
      return go(geomopt::ManifoldMuon(muon_options(o.manifold_muon_lr, o), common));
  }
  throw std::logic_error(std::string(c.name) + ": no optimizer for this network");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  Split train_set, test_set;
  try {
    o = parse(argc, argv);
    train_set = load_split(o.data, "train", o.train_limit);
    test_set = load_split(o.data, "t10k", o.test_limit);
    fs::create_directories(o.out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 2;
  }
  // After the arguments and the data, whose errors every rank meets alike and exits by.
  const World world(&argc, &argv);
  // The other ranks' numbers are rank 0's: only rank 0 prints.
  if (!world.writes() && std::freopen("/dev/null", "w", stdout) == nullptr) return 2;
  std::printf(
      "Fashion-MNIST: %lld training and %lld test images from %s; batch %lld, Adam lr %g, Muon lr %g, "
      "manifold Muon lr %g (cosine), %d epochs, %d threads",
      static_cast<long long>(train_set.x.cols()), static_cast<long long>(test_set.x.cols()), o.data.c_str(),
      static_cast<long long>(o.batch), o.lr, o.muon_lr, o.manifold_muon_lr, o.epochs, o.threads);
  if (world.size() > 1)
    std::printf(" per rank; data-parallel over %d ranks, each batch split among them", world.size());
  std::printf("\n");

  const fs::path csv = o.out / "metrics.csv";
  std::vector<Row> rows = o.resume ? read_rows(csv) : std::vector<Row>{};
  std::map<std::string, Outcome> outcomes;
  try {
    for (const std::string& config : o.configs) {
      // Every configuration of a network starts from the same initial point, whatever its optimizer.
      geomopt::Rng rng(o.seed);
      const Config& c = *find_config(config);
      switch (c.network) {
        case Network::free_mlp:
          outcomes[config] =
              run_config(c, make_mlp<FreeDense>(rng, o.hidden), o, train_set, test_set, rows, csv, world);
          break;
        case Network::stiefel_mlp:
          outcomes[config] =
              run_config(c, make_mlp<StiefelDense>(rng, o.hidden), o, train_set, test_set, rows, csv, world);
          break;
        case Network::attention:
          outcomes[config] = run_config(c, make_attention(rng, o.attn_dim, o.attn_proj, o.patches), o, train_set,
                                        test_set, rows, csv, world);
          break;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    world.abort_job(2);
    return 2;
  }

  std::printf(
      "\n| configuration | test accuracy | training time | max check(W) | cond(W diag(gain)) per hidden layer |\n"
      "|---|---|---|---|---|\n");
  for (const auto& config : o.configs) {
    const Outcome& r = outcomes[config];
    char defect[32] = "-";
    if (r.has_stiefel) std::snprintf(defect, sizeof defect, "%.1e", r.defect);
    std::string conds;
    for (double c : r.conditions) {
      char text[32];
      std::snprintf(text, sizeof text, "%s%.3g", conds.empty() ? "" : ", ", c);
      conds += text;
    }
    std::printf("| %s | %.2f %% | %.0f s | %s | %s |\n", config.c_str(), r.test_acc, r.train_seconds, defect,
                conds.empty() ? "-" : conds.c_str());
  }
  std::printf("metrics: %s\n", csv.c_str());
  if (world.writes()) {
    if (const auto png = plot(o.out, rows, o.configs))
      std::printf("plot: %s\n", fs::absolute(*png).c_str());
    else
      std::printf("plot: not drawn (gnuplot is missing or failed)\n");
  }

  int status = 0;
  for (const auto& [config, r] : outcomes)
    if (!r.gradient_passed) {
      std::printf("FAILED: %s's backward pass fails check_gradient (its report is above)\n", config.c_str());
      status = 1;
    }
  for (const auto& [config, r] : outcomes)
    if (r.has_stiefel && !(r.defect < 1e-5)) {
      std::printf("FAILED: %s ends with check(W) = %.2e, above 1e-5\n", config.c_str(), r.defect);
      status = 1;
    }
  if (o.min_accuracy > 0 && outcomes.count("stiefel") && !(outcomes["stiefel"].test_acc >= o.min_accuracy)) {
    std::printf("FAILED: the stiefel configuration reached %.2f %% test accuracy, below %.2f %%\n",
                outcomes["stiefel"].test_acc, o.min_accuracy);
    status = 1;
  }
  return status;
}
