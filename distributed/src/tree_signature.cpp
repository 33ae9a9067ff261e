// check_same_tree (tree_signature.hpp): every rank's tree signature all-gathered and compared with rank 0's; on a
// difference, the first differing leaf is found by the differing rank against rank 0's per-leaf hashes, and both sides
// describe it, so every rank throws the same message.
#include "tree_signature.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "geomopt/distributed/error.hpp"
#include "mpi_call.hpp"

namespace geomopt::distributed::detail {

namespace {

std::uint64_t fnv1a(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}
constexpr std::uint64_t kFnvBasis = 14695981039346656037ull;

// Per leaf: its path and its blocks' shapes and scalars.
std::vector<std::uint64_t> leaf_hashes(const TreeShape& shape) {
  std::vector<std::uint64_t> h(shape.paths.size(), kFnvBasis);
  for (std::size_t l = 0; l < shape.paths.size(); ++l) h[l] = fnv1a(h[l], shape.paths[l].data(), shape.paths[l].size());
  for (const BlockShape& b : shape.blocks) {
    auto& x = h[static_cast<std::size_t>(b.leaf)];
    const std::int64_t words[3] = {b.rows, b.cols, b.scalar_bytes};
    x = fnv1a(x, words, sizeof words);
  }
  return h;
}

std::string describe_found(std::int64_t rows, std::int64_t cols) {
  if (rows < 0) return "no such block (the tree ends before it)";
  return std::to_string(rows) + " x " + std::to_string(cols);
}

}  // namespace

void check_same_tree(const Link& link, const TreeShape& shape, std::int64_t entries, FlatScalar scalar,
                     const SharedSetting& setting) {
  const MPI_Comm comm = link.comm;
  const std::string operation = std::string(setting.who) + " (the check that every rank has the same tree)";
  // Each collective of the check: started non-blocking, waited for within the timeout.
  auto collective = [&](auto start, const char* call, const char* part) {
    MPI_Request request = MPI_REQUEST_NULL;
    check(start(&request), call, comm);
    link.wait(&request, 1, nullptr, {operation.c_str(), part});
  };
  auto bcast = [&](void* buffer, int count, MPI_Datatype type, int root) {
    collective([&](MPI_Request* r) { return MPI_Ibcast(buffer, count, type, root, comm, r); }, "MPI_Ibcast",
               "a broadcast of where the trees differ");
  };
  int rank = 0, P = 1;
  check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", comm);
  check(MPI_Comm_size(comm, &P), "MPI_Comm_size", comm);
  const std::string who = setting.who;
  const std::vector<std::uint64_t> leaves = leaf_hashes(shape);
  std::uint64_t tree_hash = kFnvBasis;
  for (std::uint64_t h : leaves) tree_hash = fnv1a(tree_hash, &h, sizeof h);
  constexpr int kWords = 6;
  const std::uint64_t mine[kWords] = {static_cast<std::uint64_t>(entries), leaves.size(), tree_hash,
                                      static_cast<std::uint64_t>(scalar),  setting.value, setting.valid ? 1u : 0u};
  std::vector<std::uint64_t> all(static_cast<std::size_t>(P) * kWords);
  collective(
      [&](MPI_Request* r) {
        return MPI_Iallgather(mine, kWords, MPI_UINT64_T, all.data(), kWords, MPI_UINT64_T, comm, r);
      },
      "MPI_Iallgather", "the all-gather of the trees' signatures");
  auto word = [&](int q, int w) { return all[static_cast<std::size_t>(q) * kWords + static_cast<std::size_t>(w)]; };

  // Options first: with different buckets the messages would not match.
  for (int q = 0; q < P; ++q) {
    if (word(q, 5) == 0)
      throw std::invalid_argument(who + ": rank " + std::to_string(q) + "'s " + setting.options + " are invalid" +
                                  (q == rank ? ": " + setting.invalid : std::string()));
    if (word(q, 4) != word(0, 4))
      throw std::invalid_argument(who + ": every rank must pass the same " + setting.options + "::" + setting.field +
                                  "; rank " + std::to_string(q) + " has " + std::to_string(word(q, 4)) + ", rank 0 " +
                                  std::to_string(word(0, 4)));
  }

  std::vector<int> differing;
  for (int q = 1; q < P; ++q)
    for (int w = 0; w < 4; ++w)
      if (word(q, w) != word(0, w)) {
        differing.push_back(q);
        break;
      }
  if (differing.empty()) return;

  // Where the first differing rank differs from rank 0: rank 0's leaf hashes go to everyone, that rank finds the
  // first leaf that differs, and both describe it.
  const int bad = differing.front();
  const std::size_t leaves0 = word(0, 1), leaves_bad = word(bad, 1);
  std::vector<std::uint64_t> hashes0 = rank == 0 ? leaves : std::vector<std::uint64_t>(leaves0);
  bcast(hashes0.data(), static_cast<int>(leaves0), MPI_UINT64_T, 0);
  std::int64_t first = 0;
  if (rank == bad) {
    const std::size_t common = std::min(leaves0, leaves.size());
    std::size_t i = 0;
    while (i < common && hashes0[i] == leaves[i]) ++i;
    first = static_cast<std::int64_t>(i);
  }
  bcast(&first, 1, MPI_INT64_T, bad);
  const auto at = static_cast<std::size_t>(first);
  auto broadcast = [&](std::string text, int root) {
    std::int64_t n = static_cast<std::int64_t>(text.size());
    bcast(&n, 1, MPI_INT64_T, root);
    text.resize(static_cast<std::size_t>(n));
    bcast(text.data(), static_cast<int>(n), MPI_CHAR, root);
    return text;
  };
  auto local_path = [&] { return at < shape.paths.size() ? shape.paths[at] : std::string(); };
  auto local_description = [&] {
    return at < shape.paths.size() ? shape.descriptions[at]
                                   : "no leaf there (" + std::to_string(shape.paths.size()) + " leaves)";
  };
  const std::string path0 = broadcast(rank == 0 ? local_path() : std::string(), 0);
  const std::string what0 = broadcast(rank == 0 ? local_description() : std::string(), 0);
  const std::string path_bad = broadcast(rank == bad ? local_path() : std::string(), bad);
  const std::string what_bad = broadcast(rank == bad ? local_description() : std::string(), bad);
  const std::string path = path_bad.empty() ? path0 : path_bad;

  std::string message = who + ": rank " + std::to_string(bad) + "'s tree differs from rank 0's";
  if (at < std::max(leaves0, leaves_bad)) {
    message += " at " + (path.empty() ? "leaf " + std::to_string(at) : path) + ": rank 0 has " + what0 + ", rank " +
               std::to_string(bad) + " has " + what_bad;
  }
  message += " (rank 0: " + std::to_string(word(0, 0)) + " entries in " + std::to_string(leaves0) + " leaves; rank " +
             std::to_string(bad) + ": " + std::to_string(word(bad, 0)) + " in " + std::to_string(leaves_bad) + ")";
  if (differing.size() > 1) {
    message += "; ranks differing from rank 0:";
    for (int q : differing) message += " " + std::to_string(q);
  }
  throw MismatchError(message, bad, path);
}

void throw_status_mismatch(const TreeShape& shape, const std::int64_t* status_in, int P, const std::string& who,
                           const std::string& built) {
  for (int q = 0; q < P; ++q) {
    const std::int64_t* s = status_in + static_cast<std::size_t>(q) * kStatusWords;
    if (s[0] < 0) continue;
    const auto leaf = static_cast<std::size_t>(s[0]);
    std::string message =
        who + ": rank " + std::to_string(q) + "'s tree differs from the one " + built + " was built with";
    std::string path;
    if (leaf < shape.paths.size()) {
      path = shape.paths[leaf];
      std::int64_t rows = -1, cols = -1, seen = 0;
      for (const BlockShape& b : shape.blocks)
        if (b.leaf == s[0] && seen++ == s[1]) rows = b.rows, cols = b.cols;
      message += ", at " + path + " (" + shape.descriptions[leaf] + "): block " + std::to_string(s[1]) + " is " +
                 describe_found(s[2], s[3]) +
                 (rows < 0 ? ", where it has no such block"
                           : ", " + std::to_string(rows) + " x " + std::to_string(cols) + " expected");
    } else {
      message += ": it has a leaf past the last of the " + std::to_string(shape.paths.size()) + " it was built with (" +
                 describe_found(s[2], s[3]) + ")";
    }
    throw MismatchError(message + "; every rank's tree is unchanged", q, path);
  }
  throw std::logic_error(who + ": throw_status_mismatch without a mismatch");
}

}  // namespace geomopt::distributed::detail
