// Helpers for the io tests: a scratch directory per test, deterministic filling of every storage block, and a
// byte snapshot of a tree for "unchanged" and "bit for bit" checks. Nothing here calls geomopt::io.
#pragma once

#include <doctest/doctest.h>

#include <geomopt/ptree.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace pt = geomopt::ptree;

namespace iotest {

// A fresh directory under the build tree's temporary area, removed at the end of the test.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) {
    path_ = std::filesystem::temp_directory_path() /
            ("geomopt_io_" + name + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::filesystem::path path_;
};

// Sets entry k of every storage block (trainable and buffers, in walk order) to start + k * step (bool: parity).
template <class Tree>
void fill(Tree& tree, double start, double step = 1.0) {
  double v = start;
  pt::for_each_storage(
      pt::all,
      [&](auto& block) {
        using B = std::remove_cvref_t<decltype(block)>;
        if constexpr (std::is_arithmetic_v<B>) {
          if constexpr (std::is_same_v<B, bool>)
            block = static_cast<long long>(v) % 2 != 0;
          else
            block = static_cast<B>(v);
          v += step;
        } else {
          using S = typename B::Scalar;
          for (Eigen::Index j = 0; j < block.cols(); ++j)
            for (Eigen::Index i = 0; i < block.rows(); ++i) {
              block(i, j) = static_cast<S>(v);
              v += step;
            }
        }
      },
      tree);
}

// The bytes of every storage block, in walk order.
template <class Tree>
std::vector<unsigned char> snapshot(const Tree& tree) {
  std::vector<unsigned char> out;
  pt::for_each_storage(
      pt::all,
      [&](const auto& block) {
        using B = std::remove_cvref_t<decltype(block)>;
        if constexpr (std::is_arithmetic_v<B>) {
          const auto* p = reinterpret_cast<const unsigned char*>(&block);
          out.insert(out.end(), p, p + sizeof(B));
        } else {
          using S = typename B::Scalar;
          for (Eigen::Index j = 0; j < block.cols(); ++j)
            for (Eigen::Index i = 0; i < block.rows(); ++i) {
              const S s = block(i, j);
              const auto* p = reinterpret_cast<const unsigned char*>(&s);
              out.insert(out.end(), p, p + sizeof(S));
            }
        }
      },
      tree);
  return out;
}

// A minimal optimizer state with the members save_checkpoint and load_checkpoint use (io/checkpoint.hpp): named
// arrays by leaf path, a step count and hyperparameters, so that tests of the file format need no optimizer (whose
// templates cost a test file most of its compile time).
template <class S, class Tree>
struct FakeState {
  struct Slot {
    std::string path, name;
    Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic> data;
  };
  std::string kind = "Fake";
  std::vector<std::pair<std::string, double>> hp;
  std::vector<Slot> slots;
  std::int64_t step = 0;

  std::int64_t step_count() const { return step; }
  void set_step_count(std::int64_t t) { step = t; }
  std::string_view optimizer() const { return kind; }
  const std::vector<std::pair<std::string, double>>& hyperparameters() const { return hp; }
  template <class F>
  void for_each_slot(F&& f) {
    for (auto& s : slots)
      f(s.path, std::string_view(s.name),
        Eigen::Map<Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>>(s.data.data(), s.data.rows(), s.data.cols()));
  }
  const Tree* ema() const { return nullptr; }
};

inline std::vector<char> read_bytes(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
inline void write_bytes(const std::string& file, const char* data, std::size_t n) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(data, static_cast<std::streamsize>(n));
}

}  // namespace iotest
