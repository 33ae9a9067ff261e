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

#include "engine_base.hpp"
#include "geomopt/distributed/communicator.hpp"
#include "mpi_call.hpp"
#include "rank_order_mean.hpp"
#include "tree_signature.hpp"

namespace geomopt::distributed::detail {

namespace {

constexpr int kStatusTag = 24001;
constexpr int kScatterTag = 24002;
constexpr int kGatherTag = 24003;

}  // namespace

struct AveragingEngine::State : EngineBase {
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
  std::vector<Peer> scatter_peer, gather_peer, status_peer;  // the other end of each request, for a wait's errors
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

  State() { requests = {&scatter, &gather, &status}; }
  ~State() { free_requests(); }

  void exchange_signatures(const AverageOptions& options);
  void build();
  void pack(std::size_t k, const BlockAccess* blocks, bool unpack);
  void reduce(std::size_t k);
  [[noreturn]] void throw_call_mismatch();
  void run(const BlockAccess* blocks, const LocalMismatch& mismatch);
};

void AveragingEngine::State::exchange_signatures(const AverageOptions& options) {
  std::string invalid;
  const bool valid = options.IsValid(&invalid);
  check_same_tree(link, shape, entries, scalar,
                  {"GradientAverager", "AverageOptions", "bucket_bytes", options.bucket_bytes, valid, invalid});
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
  throw_status_mismatch(shape, status_in.data(), P, "GradientAverager::average", "the averager");
}

AveragingEngine::AveragingEngine(const Communicator& comm, const AverageOptions& options, FlatScalar scalar,
                                 TreeShape shape)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.open(comm, scalar, "GradientAverager");
  s.shape = std::move(shape);
  s.build();
  guarded(s.link, "GradientAverager", [&] { s.exchange_signatures(options); });

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
    // The leaf of a chunk's first entry.
    auto leaf_at = [&](std::int64_t entry) {
      std::size_t j = s.first_block[k];
      while (j + 1 < s.offset.size() && s.offset[j + 1] <= entry) ++j;
      return s.shape.blocks.empty() ? std::int64_t{-1} : s.shape.blocks[j].leaf;
    };
    const std::int64_t own_leaf = leaf_at(lo + s.chunk_lo(n, s.rank));
    MPI_Request r;
    // Phase 1: the other ranks' contributions to my chunk, into the slot in rank order; my contributions to theirs.
    for (int q = 0, i = 0; q < s.P; ++q) {
      if (q == s.rank) continue;
      if (own > 0) {
        check(MPI_Recv_init(slot + static_cast<std::size_t>(i) * static_cast<std::size_t>(own) * s.elem,
                            static_cast<int>(own), s.type, q, kScatterTag, s.comm, &r),
              "MPI_Recv_init", s.comm);
        s.scatter.push_back(r);
        s.scatter_peer.push_back({q, true, own_leaf});
      }
      ++i;
    }
    // A message with each other rank q over its chunk q of this bucket in the flat vector: phase 1 sends them, phase
    // 2 receives them back finished.
    auto chunk_messages = [&](auto init, const char* call, int tag, std::vector<MPI_Request>& list,
                              std::vector<Peer>& peers, bool receive) {
      for (int q = 0; q < s.P; ++q) {
        const std::int64_t size = s.chunk_size(n, q);
        if (q == s.rank || size == 0) continue;
        check(init(flat + static_cast<std::size_t>(lo + s.chunk_lo(n, q)) * s.elem, static_cast<int>(size), s.type, q,
                   tag, s.comm, &r),
              call, s.comm);
        list.push_back(r);
        peers.push_back({q, receive, leaf_at(lo + s.chunk_lo(n, q))});
      }
    };
    chunk_messages(MPI_Send_init, "MPI_Send_init", kScatterTag, s.scatter, s.scatter_peer, false);
    s.scatter_at.push_back(s.scatter.size());
    // Phase 2: the finished chunks of the others into the flat vector; mine to each of them.
    chunk_messages(MPI_Recv_init, "MPI_Recv_init", kGatherTag, s.gather, s.gather_peer, true);
    for (int q = 0; q < s.P; ++q) {
      if (q == s.rank || own == 0) continue;
      check(MPI_Send_init(own_at, static_cast<int>(own), s.type, q, kGatherTag, s.comm, &r), "MPI_Send_init", s.comm);
      s.gather.push_back(r);
      s.gather_peer.push_back({q, false, own_leaf});
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
    s.status_peer.push_back({q, true, -1});
    check(MPI_Send_init(s.status_out, kStatusWords, MPI_INT64_T, q, kStatusTag, s.comm, &r), "MPI_Send_init", s.comm);
    s.status.push_back(r);
    s.status_peer.push_back({q, false, -1});
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
  guarded(s.link, "GradientAverager::average", [&] { s.run(blocks, mismatch); });
}

void AveragingEngine::State::run(const BlockAccess* blocks, const LocalMismatch& mismatch) {
  State& s = *this;
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
  auto wait = [&](std::vector<MPI_Request>& list, const std::vector<Peer>& peers, std::size_t from, std::size_t to,
                  const char* part, std::size_t bucket) {
    link.wait(list.data() + from, static_cast<int>(to - from), peers.data() + from,
              {"GradientAverager::average", part, &s.shape.paths, -1, static_cast<std::int64_t>(bucket)});
  };
  bool statuses_known = false, any_mismatch = false;
  auto learn_statuses = [&] {
    if (statuses_known) return;
    wait(s.status, s.status_peer, 0, s.status.size(), "the status messages", kNoIndex);
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
        wait(s.scatter, s.scatter_peer, s.scatter_at[reduced], s.scatter_at[reduced + 1],
             "the reduce-scatter of bucket", reduced);
      else
        wait(s.gather, s.gather_peer, s.gather_at[finished], s.gather_at[finished + 1], "the all-gather of bucket",
             finished);
    }
  }
  learn_statuses();
  if (any_mismatch) s.throw_call_mismatch();
}

}  // namespace geomopt::distributed::detail
