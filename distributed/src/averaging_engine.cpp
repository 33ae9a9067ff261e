// The averaging engine (detail/averaging_engine.hpp): buckets, the reduce-scatter and all-gather of each bucket as
// persistent point-to-point messages, and the signature check.
//
// Why point-to-point and not MPI_Iallreduce: MPI does not fix the order in which an all-reduce adds the ranks'
// contributions, and Open MPI's algorithms (ring, recursive doubling, Rabenseifner; chosen by message size and rank
// count) add them in different orders, some of them differently on different ranks. Here each chunk's sum is computed
// by one rank, in rank order, and copied to the others, so the bits are fixed by construction: the same on every rank
// and equal to the serial left-to-right sum, for any bucket size and any transport.
//
// Messages: per bucket k and peer q, one message of chunk q (scatter) and one of the owner's finished chunk (gather),
// each with its own tag per phase; messages of one tag between two ranks match in the order they were started
// (MPI's non-overtaking rule), and every rank starts them in bucket order, so one tag per phase suffices. Chunks of
// zero entries are sent by neither side. A status message per peer and call carries the local shape check, so that a
// tree that changed on one rank ends in an error on all ranks instead of a hang.
#include "geomopt/distributed/detail/averaging_engine.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "geomopt/distributed/communicator.hpp"
#include "mpi_call.hpp"

namespace geomopt::distributed::detail {

namespace {

constexpr int kStatusTag = 24001;
constexpr int kScatterTag = 24002;
constexpr int kGatherTag = 24003;
constexpr int kStatusWords = 4;

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

// The mean of the P contributions c[0..P-1] (rank order) of n entries into out, which may be one of them: per entry,
// ((c0 + c1) + ... + c_{P-1}) / P. Tiles keep the accumulator in cache and let the compiler vectorise the adds.
template <class S>
void mean_in_rank_order(S* out, const void* const* c, int P, std::ptrdiff_t n) {
  constexpr std::ptrdiff_t kTile = 512;
  S acc[kTile];
  const S divisor = static_cast<S>(P);
  for (std::ptrdiff_t t = 0; t < n; t += kTile) {
    const std::ptrdiff_t m = std::min(kTile, n - t);
    const S* c0 = static_cast<const S*>(c[0]) + t;
    for (std::ptrdiff_t i = 0; i < m; ++i) acc[i] = c0[i];
    for (int q = 1; q < P; ++q) {
      const S* cq = static_cast<const S*>(c[q]) + t;
      for (std::ptrdiff_t i = 0; i < m; ++i) acc[i] += cq[i];
    }
    for (std::ptrdiff_t i = 0; i < m; ++i) out[t + i] = acc[i] / divisor;
  }
}

std::string describe_found(std::int64_t rows, std::int64_t cols) {
  if (rows < 0) return "no such block (the tree ends before it)";
  return std::to_string(rows) + " x " + std::to_string(cols);
}

}  // namespace

struct AveragingEngine::State {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int P = 1;
  FlatScalar scalar = FlatScalar::float64;
  std::size_t elem = 8;
  MPI_Datatype type = MPI_DOUBLE;
  TreeShape shape;
  std::vector<std::int64_t> offset;  // per block: first entry in the flat vector
  std::int64_t entries = 0;
  std::int64_t bucket_entries = 1;
  int in_flight = 1;
  std::size_t buckets = 0;
  std::vector<std::size_t> first_block;  // per bucket
  std::vector<double> flat;              // the flat tree; double storage aligns float and double
  std::vector<double> stage;             // in_flight slots, each (P - 1) chunk-sized receive areas
  std::size_t slot_bytes = 0;
  // Persistent requests: per bucket k, phase 1 (scatter: receives then sends) in scatter[scatter_at[k],
  // scatter_at[k+1]) and phase 2 (gather) likewise; the status exchange in status.
  std::vector<MPI_Request> scatter, gather, status;
  std::vector<std::size_t> scatter_at, gather_at;
  std::int64_t status_out[kStatusWords] = {};
  std::vector<std::int64_t> status_in;  // P x kStatusWords
  std::vector<const void*> contributions;
  std::size_t bytes_sent = 0;

  std::byte* flat_bytes() { return reinterpret_cast<std::byte*>(flat.data()); }
  std::int64_t bucket_lo(std::size_t k) const { return static_cast<std::int64_t>(k) * bucket_entries; }
  std::int64_t bucket_hi(std::size_t k) const { return std::min(entries, bucket_lo(k) + bucket_entries); }
  // Chunk c of a bucket of n entries: [c n / P, (c + 1) n / P).
  std::int64_t chunk_lo(std::int64_t n, int c) const { return n * c / P; }
  std::int64_t chunk_size(std::int64_t n, int c) const { return chunk_lo(n, c + 1) - chunk_lo(n, c); }

  ~State() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (auto* list : {&scatter, &gather, &status})
      for (MPI_Request& r : *list)
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }

  void exchange_signatures(const AverageOptions& options);
  void build();
  void pack(std::size_t k, const BlockAccess* blocks, bool unpack);
  void reduce(std::size_t k);
  [[noreturn]] void throw_call_mismatch();
};

void AveragingEngine::State::exchange_signatures(const AverageOptions& options) {
  std::string invalid;
  const bool valid = options.IsValid(&invalid);
  const std::vector<std::uint64_t> leaves = leaf_hashes(shape);
  std::uint64_t tree_hash = kFnvBasis;
  for (std::uint64_t h : leaves) tree_hash = fnv1a(tree_hash, &h, sizeof h);
  constexpr int kWords = 6;
  const std::uint64_t mine[kWords] = {static_cast<std::uint64_t>(entries), leaves.size(),        tree_hash,
                                      static_cast<std::uint64_t>(scalar),  options.bucket_bytes, valid ? 1u : 0u};
  std::vector<std::uint64_t> all(static_cast<std::size_t>(P) * kWords);
  check(MPI_Allgather(mine, kWords, MPI_UINT64_T, all.data(), kWords, MPI_UINT64_T, comm), "MPI_Allgather", comm);
  auto word = [&](int q, int w) { return all[static_cast<std::size_t>(q) * kWords + static_cast<std::size_t>(w)]; };

  // Options first: with different buckets the messages would not match.
  for (int q = 0; q < P; ++q) {
    if (word(q, 5) == 0)
      throw std::invalid_argument("GradientAverager: rank " + std::to_string(q) + "'s AverageOptions are invalid" +
                                  (q == rank ? ": " + invalid : std::string()));
    if (word(q, 4) != word(0, 4))
      throw std::invalid_argument(
          "GradientAverager: every rank must pass the same AverageOptions::bucket_bytes; rank " + std::to_string(q) +
          " has " + std::to_string(word(q, 4)) + ", rank 0 " + std::to_string(word(0, 4)));
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
  check(MPI_Bcast(hashes0.data(), static_cast<int>(leaves0), MPI_UINT64_T, 0, comm), "MPI_Bcast", comm);
  std::int64_t first = 0;
  if (rank == bad) {
    const std::size_t common = std::min(leaves0, leaves.size());
    std::size_t i = 0;
    while (i < common && hashes0[i] == leaves[i]) ++i;
    first = static_cast<std::int64_t>(i);
  }
  check(MPI_Bcast(&first, 1, MPI_INT64_T, bad, comm), "MPI_Bcast", comm);
  const auto at = static_cast<std::size_t>(first);
  auto broadcast = [&](std::string text, int root) {
    std::int64_t n = static_cast<std::int64_t>(text.size());
    check(MPI_Bcast(&n, 1, MPI_INT64_T, root, comm), "MPI_Bcast", comm);
    text.resize(static_cast<std::size_t>(n));
    check(MPI_Bcast(text.data(), static_cast<int>(n), MPI_CHAR, root, comm), "MPI_Bcast", comm);
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

  std::string message = "GradientAverager: rank " + std::to_string(bad) + "'s tree differs from rank 0's";
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

void AveragingEngine::State::build() {
  const std::size_t nblocks = shape.blocks.size();
  offset.resize(nblocks);
  for (std::size_t j = 0; j < nblocks; ++j) {
    offset[j] = entries;
    entries += shape.blocks[j].rows * shape.blocks[j].cols;
  }
}

void AveragingEngine::State::pack(std::size_t k, const BlockAccess* blocks, bool unpack) {
  const std::int64_t lo = bucket_lo(k), hi = bucket_hi(k);
  for (std::size_t j = first_block[k]; j < offset.size() && offset[j] < hi; ++j) {
    const std::int64_t size = shape.blocks[j].rows * shape.blocks[j].cols;
    const std::int64_t begin = std::max(lo, offset[j]) - offset[j], end = std::min(hi, offset[j] + size) - offset[j];
    if (end <= begin) continue;
    std::byte* at = flat_bytes() + static_cast<std::size_t>(offset[j] + begin) * elem;
    if (unpack)
      blocks[j].unpack(blocks[j].block, at, begin, end - begin);
    else
      blocks[j].pack(blocks[j].block, at, begin, end - begin);
  }
}

void AveragingEngine::State::reduce(std::size_t k) {
  const std::int64_t lo = bucket_lo(k), n = bucket_hi(k) - lo;
  const std::int64_t own = chunk_size(n, rank);
  if (own == 0) return;
  std::byte* mine = flat_bytes() + static_cast<std::size_t>(lo + chunk_lo(n, rank)) * elem;
  std::byte* slot = reinterpret_cast<std::byte*>(stage.data()) + (k % static_cast<std::size_t>(in_flight)) * slot_bytes;
  for (int q = 0, s = 0; q < P; ++q)
    contributions[static_cast<std::size_t>(q)] =
        q == rank ? mine : slot + static_cast<std::size_t>(s++) * static_cast<std::size_t>(own) * elem;
  if (scalar == FlatScalar::float32)
    mean_in_rank_order(reinterpret_cast<float*>(mine), contributions.data(), P, own);
  else
    mean_in_rank_order(reinterpret_cast<double*>(mine), contributions.data(), P, own);
}

void AveragingEngine::State::throw_call_mismatch() {
  for (int q = 0; q < P; ++q) {
    const std::int64_t* s = &status_in[static_cast<std::size_t>(q) * kStatusWords];
    if (s[0] < 0) continue;
    const auto leaf = static_cast<std::size_t>(s[0]);
    std::string message = "GradientAverager::average: rank " + std::to_string(q) +
                          "'s tree differs from the one the averager was built with";
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
  throw std::logic_error("GradientAverager: throw_call_mismatch without a mismatch");
}

AveragingEngine::AveragingEngine(const Communicator& comm, const AverageOptions& options, FlatScalar scalar,
                                 TreeShape shape)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  const MPI_Comm parent = native(comm);
  check(MPI_Comm_dup(parent, &s.comm), "MPI_Comm_dup", parent);
  check(MPI_Comm_rank(s.comm, &s.rank), "MPI_Comm_rank", s.comm);
  check(MPI_Comm_size(s.comm, &s.P), "MPI_Comm_size", s.comm);
  s.scalar = scalar;
  s.elem = scalar == FlatScalar::float32 ? sizeof(float) : sizeof(double);
  s.type = scalar == FlatScalar::float32 ? MPI_FLOAT : MPI_DOUBLE;
  s.shape = std::move(shape);
  s.build();
  s.exchange_signatures(options);

  s.in_flight = options.buckets_in_flight;
  s.bucket_entries = std::max<std::int64_t>(1, static_cast<std::int64_t>(options.bucket_bytes / s.elem));
  s.buckets = static_cast<std::size_t>((s.entries + s.bucket_entries - 1) / s.bucket_entries);
  s.first_block.resize(s.buckets);
  for (std::size_t k = 0, j = 0; k < s.buckets; ++k) {
    while (j < s.offset.size() && s.offset[j] + s.shape.blocks[j].rows * s.shape.blocks[j].cols <= s.bucket_lo(k)) ++j;
    s.first_block[k] = j;
  }
  s.flat.resize((static_cast<std::size_t>(s.entries) * s.elem + sizeof(double) - 1) / sizeof(double));
  s.status_in.assign(static_cast<std::size_t>(s.P) * kStatusWords, -1);
  s.contributions.resize(static_cast<std::size_t>(s.P));
  if (s.P == 1) return;

  // The largest own chunk decides the staging slot.
  std::int64_t max_own = 0;
  for (std::size_t k = 0; k < s.buckets; ++k)
    max_own = std::max(max_own, s.chunk_size(s.bucket_hi(k) - s.bucket_lo(k), s.rank));
  s.slot_bytes = static_cast<std::size_t>(max_own) * static_cast<std::size_t>(s.P - 1) * s.elem;
  s.slot_bytes = (s.slot_bytes + sizeof(double) - 1) / sizeof(double) * sizeof(double);
  s.stage.resize(s.slot_bytes / sizeof(double) * static_cast<std::size_t>(s.in_flight));

  std::byte* flat = s.flat_bytes();
  auto* stage = reinterpret_cast<std::byte*>(s.stage.data());
  s.scatter_at.push_back(0);
  s.gather_at.push_back(0);
  for (std::size_t k = 0; k < s.buckets; ++k) {
    const std::int64_t lo = s.bucket_lo(k), n = s.bucket_hi(k) - lo;
    const std::int64_t own = s.chunk_size(n, s.rank);
    std::byte* slot = stage + (k % static_cast<std::size_t>(s.in_flight)) * s.slot_bytes;
    std::byte* own_at = flat + static_cast<std::size_t>(lo + s.chunk_lo(n, s.rank)) * s.elem;
    MPI_Request r;
    // Phase 1: the other ranks' contributions to my chunk, into the slot in rank order; my contributions to theirs.
    for (int q = 0, i = 0; q < s.P; ++q) {
      if (q == s.rank) continue;
      if (own > 0) {
        check(MPI_Recv_init(slot + static_cast<std::size_t>(i) * static_cast<std::size_t>(own) * s.elem,
                            static_cast<int>(own), s.type, q, kScatterTag, s.comm, &r),
              "MPI_Recv_init", s.comm);
        s.scatter.push_back(r);
      }
      ++i;
    }
    // A message with each other rank q over its chunk q of this bucket in the flat vector: phase 1 sends them, phase
    // 2 receives them back finished.
    auto chunk_messages = [&](auto init, const char* call, int tag, std::vector<MPI_Request>& list) {
      for (int q = 0; q < s.P; ++q) {
        const std::int64_t size = s.chunk_size(n, q);
        if (q == s.rank || size == 0) continue;
        check(init(flat + static_cast<std::size_t>(lo + s.chunk_lo(n, q)) * s.elem, static_cast<int>(size), s.type, q,
                   tag, s.comm, &r),
              call, s.comm);
        list.push_back(r);
      }
    };
    chunk_messages(MPI_Send_init, "MPI_Send_init", kScatterTag, s.scatter);
    s.scatter_at.push_back(s.scatter.size());
    // Phase 2: the finished chunks of the others into the flat vector; mine to each of them.
    chunk_messages(MPI_Recv_init, "MPI_Recv_init", kGatherTag, s.gather);
    for (int q = 0; q < s.P; ++q) {
      if (q == s.rank || own == 0) continue;
      check(MPI_Send_init(own_at, static_cast<int>(own), s.type, q, kGatherTag, s.comm, &r), "MPI_Send_init", s.comm);
      s.gather.push_back(r);
    }
    // The others' chunks in phase 1, mine to each other rank in phase 2.
    s.bytes_sent += static_cast<std::size_t>(n - own + static_cast<std::int64_t>(s.P - 1) * own) * s.elem;
    s.gather_at.push_back(s.gather.size());
  }
  MPI_Request r;
  for (int q = 0; q < s.P; ++q) {
    if (q == s.rank) continue;
    check(MPI_Recv_init(&s.status_in[static_cast<std::size_t>(q) * kStatusWords], kStatusWords, MPI_INT64_T, q,
                        kStatusTag, s.comm, &r),
          "MPI_Recv_init", s.comm);
    s.status.push_back(r);
    check(MPI_Send_init(s.status_out, kStatusWords, MPI_INT64_T, q, kStatusTag, s.comm, &r), "MPI_Send_init", s.comm);
    s.status.push_back(r);
  }
}

AveragingEngine::~AveragingEngine() = default;
AveragingEngine::AveragingEngine(AveragingEngine&&) noexcept = default;
AveragingEngine& AveragingEngine::operator=(AveragingEngine&&) noexcept = default;

const TreeShape& AveragingEngine::shape() const noexcept { return state_->shape; }
std::size_t AveragingEngine::bucket_count() const noexcept { return state_->buckets; }
std::size_t AveragingEngine::bytes_sent_per_call() const noexcept { return state_->bytes_sent; }
int AveragingEngine::rank() const noexcept { return state_->rank; }
int AveragingEngine::size() const noexcept { return state_->P; }

void AveragingEngine::run(const BlockAccess* blocks, const LocalMismatch& mismatch) {
  State& s = *state_;
  const std::int64_t local[kStatusWords] = {mismatch.leaf, mismatch.block, mismatch.rows, mismatch.cols};
  std::copy(local, local + kStatusWords, s.status_out);
  std::copy(local, local + kStatusWords, &s.status_in[static_cast<std::size_t>(s.rank) * kStatusWords]);
  if (s.P == 1) {
    if (mismatch.leaf >= 0) s.throw_call_mismatch();
    return;  // the mean of one tree is the tree
  }
  const bool packable = mismatch.leaf < 0;
  const MPI_Comm comm = s.comm;
  auto start = [&](std::vector<MPI_Request>& list, std::size_t from, std::size_t to) {
    if (to > from) check(MPI_Startall(static_cast<int>(to - from), &list[from]), "MPI_Startall", comm);
  };
  auto test = [&](std::vector<MPI_Request>& list, std::size_t from, std::size_t to) {
    int done = 1;
    if (to > from)
      check(MPI_Testall(static_cast<int>(to - from), &list[from], &done, MPI_STATUSES_IGNORE), "MPI_Testall", comm);
    return done != 0;
  };
  auto wait = [&](std::vector<MPI_Request>& list, std::size_t from, std::size_t to) {
    if (to > from)
      check(MPI_Waitall(static_cast<int>(to - from), &list[from], MPI_STATUSES_IGNORE), "MPI_Waitall", comm);
  };
  bool statuses_known = false, any_mismatch = false;
  auto learn_statuses = [&] {
    if (statuses_known) return;
    wait(s.status, 0, s.status.size());
    for (int q = 0; q < s.P; ++q)
      any_mismatch = any_mismatch || s.status_in[static_cast<std::size_t>(q) * kStatusWords] >= 0;
    statuses_known = true;
  };

  start(s.status, 0, s.status.size());
  const std::size_t B = s.buckets, K = static_cast<std::size_t>(s.in_flight);
  std::size_t packed = 0, reduced = 0, finished = 0;
  while (finished < B) {
    bool progressed = false;
    if (packed < B && packed - reduced < K) {
      if (packable) s.pack(packed, blocks, false);
      start(s.scatter, s.scatter_at[packed], s.scatter_at[packed + 1]);
      ++packed;
      progressed = true;
    }
    if (reduced < packed && test(s.scatter, s.scatter_at[reduced], s.scatter_at[reduced + 1])) {
      s.reduce(reduced);
      start(s.gather, s.gather_at[reduced], s.gather_at[reduced + 1]);
      ++reduced;
      progressed = true;
    }
    if (finished < reduced && test(s.gather, s.gather_at[finished], s.gather_at[finished + 1])) {
      learn_statuses();
      if (!any_mismatch) s.pack(finished, blocks, true);
      ++finished;
      progressed = true;
    }
    if (!progressed) {
      if (reduced < packed)
        wait(s.scatter, s.scatter_at[reduced], s.scatter_at[reduced + 1]);
      else
        wait(s.gather, s.gather_at[finished], s.gather_at[finished + 1]);
    }
  }
  learn_statuses();
  if (any_mismatch) s.throw_call_mismatch();
}

}  // namespace geomopt::distributed::detail
