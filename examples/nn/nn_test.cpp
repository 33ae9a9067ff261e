// The examples' IDX reader on valid and broken files, and every hand-written backward pass of layers.hpp against
// central finite differences of its forward pass, in double.
#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "idx.hpp"
#include "layers.hpp"

namespace fs = std::filesystem;
using namespace geomopt::examples;
using MatD = Mat<double>;
using VecD = Vec<double>;

namespace {

std::vector<unsigned char> header(std::uint32_t magic, std::vector<std::uint32_t> dims) {
  std::vector<unsigned char> out;
  auto put = [&](std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<unsigned char>(v >> shift));
  };
  put(magic);
  for (auto d : dims) put(d);
  return out;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("geomopt_nn_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

void write_plain(const fs::path& file, const std::vector<unsigned char>& bytes) {
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_gzip(const fs::path& file, const std::vector<unsigned char>& bytes) {
  gzFile f = gzopen(file.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  gzclose(f);
}

// Images 0..count-1 of rows x cols whose pixel (r, c) of image i is (i + 3 r + 7 c) mod 256.
std::vector<unsigned char> images_file(std::uint32_t count, std::uint32_t rows, std::uint32_t cols) {
  auto bytes = header(0x803, {count, rows, cols});
  for (std::uint32_t i = 0; i < count; ++i)
    for (std::uint32_t r = 0; r < rows; ++r)
      for (std::uint32_t c = 0; c < cols; ++c) bytes.push_back(static_cast<unsigned char>((i + 3 * r + 7 * c) % 256));
  return bytes;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const IdxError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("IDX images and labels are read from plain and gzip files") {
  const auto bytes = images_file(5, 3, 4);
  for (bool gz : {false, true}) {
    const fs::path file = scratch(gz ? "images.gz" : "images");
    gz ? write_gzip(file, bytes) : write_plain(file, bytes);
    const IdxImages img = read_idx_images(file);
    CHECK(img.count == 5);
    CHECK(img.rows == 3);
    CHECK(img.cols == 4);
    REQUIRE(img.pixels.size() == 60);
    // Image 2, row 1, column 3 sits at 2 * 12 + 1 * 4 + 3.
    CHECK(img.pixels[2 * 12 + 1 * 4 + 3] == (2 + 3 * 1 + 7 * 3) % 256);
  }
  auto labels = header(0x801, {4});
  labels.insert(labels.end(), {9, 0, 3, 7});
  const fs::path file = scratch("labels.gz");
  write_gzip(file, labels);
  CHECK(read_idx_labels(file).labels == std::vector<std::uint8_t>{9, 0, 3, 7});
}

TEST_CASE("broken IDX files give an IdxError naming the file and the problem") {
  const fs::path missing = scratch("nowhere.gz");
  CHECK(error_of([&] { read_idx_images(missing); }).find(missing.string() + ": no such file") == 0);

  const fs::path labels_as_images = scratch("swapped");
  write_plain(labels_as_images, header(0x801, {0}));
  const std::string swapped = error_of([&] { read_idx_images(labels_as_images); });
  CHECK(swapped.find(labels_as_images.string()) == 0);
  CHECK(swapped.find("magic number 0x00000801, expected 0x00000803") != std::string::npos);

  auto truncated = images_file(5, 3, 4);
  truncated.resize(truncated.size() - 1);
  const fs::path short_file = scratch("short.gz");
  write_gzip(short_file, truncated);
  CHECK(error_of([&] { read_idx_images(short_file); }).find("ends inside the pixels") != std::string::npos);

  const fs::path header_only = scratch("header_only");
  write_plain(header_only, {0, 0, 8});
  CHECK(error_of([&] { read_idx_images(header_only); }).find("ends inside the header") != std::string::npos);

  auto extra = images_file(2, 2, 2);
  extra.push_back(1);
  const fs::path long_file = scratch("long");
  write_plain(long_file, extra);
  CHECK(error_of([&] { read_idx_images(long_file); }).find("trailing bytes") != std::string::npos);

  const fs::path huge = scratch("huge");
  write_plain(huge, header(0x803, {60000, 60000, 60000}));
  CHECK(error_of([&] { read_idx_images(huge); }).find("more than this reader takes") != std::string::npos);

  // A gzip stream with a corrupted body.
  const fs::path corrupt = scratch("corrupt.gz");
  write_gzip(corrupt, images_file(50, 28, 28));
  {
    std::fstream f(corrupt, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);
    const char junk[16] = {'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x'};
    f.write(junk, sizeof junk);
  }
  CHECK(error_of([&] { read_idx_images(corrupt); }).find(corrupt.string()) == 0);
}

TEST_CASE("a labelled split checks the counts and the label range") {
  const fs::path images = scratch("pair_images"), labels = scratch("pair_labels");
  write_plain(images, images_file(3, 2, 2));
  auto l = header(0x801, {3});
  l.insert(l.end(), {1, 2, 0});
  write_plain(labels, l);
  CHECK(read_idx_pair(images, labels, 3).labels.labels.size() == 3);
  CHECK(error_of([&] { read_idx_pair(images, labels, 2); }).find("label 2 at index 1, expected 0..1") !=
        std::string::npos);
  auto fewer = header(0x801, {2});
  fewer.insert(fewer.end(), {1, 0});
  write_plain(labels, fewer);
  CHECK(error_of([&] { read_idx_pair(images, labels, 3); }).find("2 labels for the 3 images") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------------

namespace {

MatD random_matrix(std::mt19937_64& rng, Eigen::Index r, Eigen::Index c) {
  std::normal_distribution<double> normal;
  MatD m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i) m(i) = normal(rng);
  return m;
}

// The largest relative error between `analytic` and the central difference of `f` over every entry of `x`.
double fd_error(const std::function<double()>& f, MatD& x, const MatD& analytic) {
  const double h = 1e-6;
  double worst = 0;
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const double saved = x(i);
    x(i) = saved + h;
    const double up = f();
    x(i) = saved - h;
    const double down = f();
    x(i) = saved;
    const double numeric = (up - down) / (2 * h);
    worst = std::max(worst, std::abs(numeric - analytic(i)) / std::max(1.0, std::abs(numeric)));
  }
  return worst;
}

// The four gradients loss(&g_0, &g_1, &g_2, &g_3) writes, each within 1e-7 of the central differences of
// loss(nullptr, nullptr, nullptr, nullptr) over its parameter (fd_error); a null parameter is not checked.
void check_backward(const std::function<double(MatD*, MatD*, MatD*, MatD*)>& loss, const std::array<MatD*, 4>& params,
                    const std::array<const char*, 4>& names) {
  std::array<MatD, 4> g;
  loss(&g[0], &g[1], &g[2], &g[3]);
  const std::function<double()> f = [&] { return loss(nullptr, nullptr, nullptr, nullptr); };
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i] != nullptr) CHECK_MESSAGE(fd_error(f, *params[i], g[i]) < 1e-7, names[i]);
}

}  // namespace

TEST_CASE("dense, ReLU and softmax cross-entropy backward passes match finite differences") {
  std::mt19937_64 rng(11);
  const Eigen::Index in = 5, out = 4, batch = 6, classes = 4;
  MatD W = random_matrix(rng, in, out), x = random_matrix(rng, in, batch);
  MatD gain_m = random_matrix(rng, out, 1), b_m = random_matrix(rng, out, 1);
  const std::vector<std::uint8_t> labels{0, 3, 1, 1, 2, 0};
  for (bool with_gain : {false, true}) {
    CAPTURE(with_gain);
    // loss = CE(softmax(relu(dense(x)))) so every piece's backward is exercised.
    auto loss = [&](MatD* dW, MatD* dgain, MatD* db, MatD* dx) {
      const VecD gain = with_gain ? VecD(gain_m.col(0)) : VecD();
      MatD pre, y, dlogits;
      dense_forward<double>(W, gain, b_m.col(0), x, pre, y);
      relu_forward(y);
      std::int64_t correct = 0;
      const double value = softmax_cross_entropy<double>(y, labels, dlogits, correct);
      if (dW) {
        relu_backward(y, dlogits);
        MatD gW, gx;
        VecD gg, gb;
        dense_backward<double>(W, gain, x, pre, dlogits, gW, gg, gb, &gx);
        *dW = gW, *db = gb, *dx = gx;
        if (with_gain) *dgain = gg;
      }
      return value;
    };
    check_backward(loss, {&W, with_gain ? &gain_m : nullptr, &b_m, &x}, {"W", "gain", "b", "x"});
  }
  static_assert(classes == 4);
}

TEST_CASE("softmax cross-entropy: value, accuracy count and stability") {
  MatD logits(3, 2);
  logits << 1000, 0, 1001, 0, 999, 5;  // huge logits must not overflow
  const std::vector<std::uint8_t> labels{1, 2};
  MatD d;
  std::int64_t correct = 0;
  const double loss = softmax_cross_entropy<double>(logits, labels, d, correct);
  const double l0 = std::log(std::exp(-1.0) + 1 + std::exp(-2.0));  // sample 0: label 1 holds the top logit
  const double l1 = std::log(2 + std::exp(5.0)) - 5;                // sample 1: label 2 holds the top logit
  CHECK(loss == doctest::Approx((l0 + l1) / 2).epsilon(1e-12));
  CHECK(correct == 2);
  CHECK(d.colwise().sum().cwiseAbs().maxCoeff() < 1e-15);  // softmax minus one-hot sums to zero per sample
}

TEST_CASE("attention with mean pooling: backward matches finite differences") {
  std::mt19937_64 rng(5);
  const Eigen::Index d = 4, n = 3, tokens = 5, batch = 2;
  MatD Wq = random_matrix(rng, d, n), Wk = random_matrix(rng, d, n), Wv = random_matrix(rng, d, n);
  MatD h = random_matrix(rng, d, tokens * batch);
  const MatD target = random_matrix(rng, n, batch);
  // loss = sum(target .* mean_pool(attention(h))) with a nonlinearity to couple the entries: 0.5 |pooled|^2 added.
  auto loss = [&](MatD* dq, MatD* dk, MatD* dv, MatD* dh) {
    AttentionCache<double> cache;
    attention_forward<double>(Wq, Wk, Wv, h, tokens, cache);
    const MatD pooled = mean_pool<double>(cache.z, tokens);
    const double value = (pooled.array() * target.array()).sum() + 0.5 * pooled.squaredNorm();
    if (dq) {
      const MatD dpooled = target + pooled;
      const MatD dz = mean_pool_backward<double>(dpooled, tokens);
      *dh = attention_backward<double>(Wq, Wk, Wv, h, tokens, cache, dz, *dq, *dk, *dv);
    }
    return value;
  };
  check_backward(loss, {&Wq, &Wk, &Wv, &h}, {"Wq", "Wk", "Wv", "h"});
  // Each query's attention weights are a probability distribution over the keys of its own sample.
  AttentionCache<double> cache;
  attention_forward<double>(Wq, Wk, Wv, h, tokens, cache);
  for (const MatD& a : cache.attn) {
    CHECK((a.rowwise().sum().array() - 1).abs().maxCoeff() < 1e-14);
    CHECK(a.minCoeff() >= 0);
  }
}
