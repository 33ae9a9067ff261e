// GradientAverager<Tree>: the mean over the ranks of a gradient tree, in place, the same bits on every rank.
//
//   GradientAverager averager(comm, grads);   collective; checks that every rank's tree has the same paths and shapes
//   averager.average(grads);                  collective; grads = (g_0 + g_1 + ... + g_{P-1}) / P, entry by entry
//   average(comm, grads);                     both at once, for a single call
//
// The tree is flattened, in ptree's walk order, to its promoted scalar S (scalar_t<Tree>: float or double; a tree
// mixing float and double leaves is averaged in double) and cut into buckets of AverageOptions::bucket_bytes. Each
// bucket is cut into P chunks; rank r receives chunk r of the bucket from every other rank, sums the P contributions
// in rank order 0, 1, ..., P-1, divides by P, and sends the finished chunk to every other rank (a reduce-scatter and an
// all-gather written with persistent point-to-point messages, packing bucket k+1 while bucket k is on the wire).
// Each rank sends about 2 (P-1) / P of the tree's flat bytes per call (bytes_sent_per_call()).
//
// Contract, for every entry i (x_q = rank q's g_i converted to S, u = the unit roundoff of S, 2^-24 for float and 2^-53
// for double, gamma_P = P u / (1 - P u)):
//   - result_i = fl(fl(...fl(x_0 + x_1) + ... + x_{P-1}) / P), the same bits on every rank, whatever the bucket size,
//     MPI's collective algorithms or the timing: each chunk is computed by one rank in one fixed order and copied;
//   - |result_i - (x_0 + ... + x_{P-1}) / P| <= gamma_P (|x_0| + ... + |x_{P-1}|) / P (the sum's P - 1 roundings and
//     the division's one); a float leaf of a mixed tree meets the float bound (its sum is in double, rounded once);
//   - P = 1 leaves the tree as it is (the mean of one gradient is itself).
// Invariants: after the first call, average() allocates nothing (the buckets, staging areas and persistent requests
// are made at construction); buffers (ptree::Buffer) are not touched; a tied leaf is averaged once.
//
// Errors: construction throws MismatchError on every rank when the ranks' trees differ (entry count, paths, shapes,
// scalars), naming the lowest differing rank and the first differing path; std::invalid_argument on every rank when
// the options are invalid or differ. average() throws MismatchError on every rank when one rank's tree no longer has
// the shapes it was built with, after the messages of the call have flowed, and every rank's tree is then untouched.
// A failing MPI call throws Error, and a wait that outlasts the Communicator's timeout TimeoutError, naming the ranks
// whose messages did not arrive and the bucket's first path; the tree then holds, bucket by bucket, either the mean
// or its own values (a bucket is written only once its mean is complete), never a partly written bucket, and the
// averager and its Communicator are poisoned (communicator.hpp).
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "geomopt/distributed/communicator.hpp"
#include "geomopt/distributed/detail/averaging_engine.hpp"
#include "geomopt/distributed/error.hpp"
#include "geomopt/distributed/options.hpp"
#include "geomopt/ptree/flatten.hpp"
#include "geomopt/ptree/walk.hpp"

namespace geomopt::distributed {

namespace detail {

// The flat scalar of a tree: its promoted scalar, double for a tree without trainable storage.
template <class Tree>
using flat_scalar_t = std::conditional_t<std::is_void_v<ptree::scalar_t<Tree>>, double, ptree::scalar_t<Tree>>;

// The type-erased access of the engine (BlockAccess) to a block of type B, over ptree's range copies.
template <class S, class B>
void pack_range(const void* block, void* dst, std::ptrdiff_t begin, std::ptrdiff_t count) {
  ptree::detail::pack_range(static_cast<S*>(dst), *static_cast<const B*>(block), begin, count);
}

template <class S, class B>
void unpack_range(void* block, const void* src, std::ptrdiff_t begin, std::ptrdiff_t count) {
  ptree::detail::unpack_range(*static_cast<B*>(block), static_cast<const S*>(src), begin, count);
}

template <class T>
const char* scalar_name() {
  if constexpr (std::is_same_v<T, float>)
    return "float";
  else if constexpr (std::is_same_v<T, double>)
    return "double";
  else
    return "long double";
}

// The shape of every block and leaf of a tree, for the engine's signature and messages.
template <class Tree>
TreeShape tree_shape(const Tree& tree) {
  TreeShape shape;
  const ptree::Layout layout = ptree::layout(tree);
  std::int64_t leaf = 0;
  ptree::for_each(
      [&](const auto& l) {
        std::string scalars;
        ptree::detail::for_each_block(
            [&](const auto& b) {
              using Scalar = ptree::detail::block_scalar_t<ptree::detail::bare<decltype(b)>>;
              shape.blocks.push_back(
                  {leaf, ptree::detail::block_rows(b), ptree::detail::block_cols(b), static_cast<int>(sizeof(Scalar))});
              if (scalars.find(scalar_name<Scalar>()) == std::string::npos)
                scalars += std::string(scalars.empty() ? "" : "/") + scalar_name<Scalar>();
            },
            l);
        std::string dims;
        for (Eigen::Index d : layout.leaves[static_cast<std::size_t>(leaf)].dims)
          dims += (dims.empty() ? " " : " x ") + std::to_string(d);
        shape.paths.push_back(layout.leaves[static_cast<std::size_t>(leaf)].path);
        shape.descriptions.push_back(scalars + (dims.empty() ? " scalar" : dims));
        ++leaf;
      },
      tree);
  return shape;
}

// Matches the storage blocks of tree, in walk order, against shapes (the tree as an operation was built for): calls
// on_block(j, block) for each block j while they match, and returns the first difference (leaf < 0: none).
template <class Tree, class F>
LocalMismatch match_blocks(Tree& tree, const std::vector<BlockShape>& shapes, F&& on_block) {
  LocalMismatch mismatch;
  std::size_t next = 0;
  std::int64_t leaf = 0;
  ptree::for_each(
      [&](auto& l) {
        std::int64_t block = 0;
        ptree::detail::for_each_block(
            [&](auto& b) {
              if (mismatch.leaf < 0) {
                const std::int64_t rows = ptree::detail::block_rows(b), cols = ptree::detail::block_cols(b);
                if (next >= shapes.size() || shapes[next].leaf != leaf || shapes[next].rows != rows ||
                    shapes[next].cols != cols) {
                  mismatch = {leaf, block, rows, cols};
                } else {
                  on_block(next++, b);
                }
              }
              ++block;
            },
            l);
        ++leaf;
      },
      tree);
  if (mismatch.leaf < 0 && next != shapes.size()) {
    std::int64_t block = 0;
    for (std::size_t j = next; j > 0 && shapes[j - 1].leaf == shapes[next].leaf; --j) ++block;
    mismatch = {shapes[next].leaf, block, -1, -1};
  }
  return mismatch;
}

}  // namespace detail

template <class Tree>
class GradientAverager {
 public:
  using Scalar = detail::flat_scalar_t<Tree>;
  static_assert(std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>,
                "GradientAverager: the tree's scalar must be float or double (a mixed tree is averaged in double)");

  /// Collective over comm; `prototype` has the shapes of the trees average() will take (the gradient tree itself).
  GradientAverager(const Communicator& comm, const Tree& prototype, AverageOptions options = {})
      : options_(options),
        engine_(comm, options,
                std::is_same_v<Scalar, float> ? detail::FlatScalar::float32 : detail::FlatScalar::float64,
                detail::tree_shape(prototype)),
        access_(engine_.shape().blocks.size()) {}

  /// Collective: grads = the mean of every rank's grads. Allocates nothing after the first call.
  void average(Tree& grads) {
    const detail::LocalMismatch mismatch =
        detail::match_blocks(grads, engine_.shape().blocks, [&](std::size_t j, auto& b) {
          using B = ptree::detail::bare<decltype(b)>;
          access_[j] = {static_cast<void*>(&b), &detail::pack_range<Scalar, B>, &detail::unpack_range<Scalar, B>};
        });
    engine_.run(access_.data(), mismatch);
  }

  const AverageOptions& options() const noexcept { return options_; }
  /// Buckets per call, and the payload bytes this rank sends per call (the two phases, about 2 (P-1)/P of the flat
  /// tree).
  std::size_t bucket_count() const noexcept { return engine_.bucket_count(); }
  std::size_t bytes_sent_per_call() const noexcept { return engine_.bytes_sent_per_call(); }

 private:
  AverageOptions options_;
  detail::AveragingEngine engine_;
  std::vector<detail::BlockAccess> access_;
};

/// One averaging: builds a GradientAverager over `grads` and averages once (collective; allocates).
template <class Tree>
void average(const Communicator& comm, Tree& grads, AverageOptions options = {}) {
  GradientAverager<Tree> averager(comm, grads, options);
  averager.average(grads);
}

}  // namespace geomopt::distributed
