// The shard exchange (detail/shard_exchange.hpp): the reduce of each unit's gradient to its owner and the gather of
// each unit's parameters from it, as persistent point-to-point messages over a flat vector ordered by owner.
//
// Why point-to-point, as in the averaging engine: the owner sums the ranks' contributions itself, in rank order, with
// the averager's own loop (rank_order_mean.hpp), so a unit's mean has the bits GradientAverager gives it, whatever the
// transport. One message per pair of ranks and phase carries a whole region (the units one rank owns), so the count
// of messages per step is 2 P (P - 1) whatever the tree; a status message per pair and step carries the local shape
// check, as the averager's does, so that a tree that changed on one rank ends in an error on every rank.
#include "geomopt/distributed/detail/shard_exchange.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "engine_base.hpp"
#include "geomopt/distributed/communicator.hpp"
#include "mpi_call.hpp"
#include "rank_order_mean.hpp"
#include "tree_signature.hpp"

namespace geomopt::distributed::detail {

namespace {

constexpr int kStatusTag = 24011;
constexpr int kReduceTag = 24012;
constexpr int kGatherTag = 24013;
constexpr int kDecisionTag = 24014;
constexpr const char* kStep = "ZeroRedundancyOptimizer::step";

}  // namespace

struct ShardExchange::State : EngineBase {
  TreeShape shape;
  // One contiguous piece of a unit within one block: entries [begin, begin + count) of block `block`, at `flat` in
  // the flat vector; `owner` the unit's.
  struct Segment {
    std::size_t block = 0;
    std::int64_t begin = 0;
    std::int64_t count = 0;
    std::int64_t flat = 0;
    int owner = 0;
  };
  std::vector<Segment> segments;     // owner-major, walk order within an owner
  std::vector<std::int64_t> region;  // P + 1 offsets: rank q's units are [region[q], region[q + 1])
  std::vector<double> flat;          // double storage aligns float and double
  std::vector<double> stage;         // (P - 1) receive areas of this rank's region
  std::vector<MPI_Request> reduce_requests, gather_requests, status_requests;
  std::vector<Peer> reduce_peers, gather_peers, status_peers;  // the other end of each request, for a wait's errors
  std::vector<MPI_Request> decision_requests;                  // 2 (P - 1): the all-gather of a step's decisions
  std::vector<Peer> decision_peers;
  std::int64_t status_out[kStatusWords] = {};
  std::vector<std::int64_t> status_in;  // P x kStatusWords
  std::vector<const void*> contributions;
  std::size_t bytes_sent = 0;

  std::byte* at(std::int64_t entry) { return reinterpret_cast<std::byte*>(flat.data()) + entry * elem; }
  std::int64_t own() const { return region[rank + 1] - region[rank]; }

  State() { requests = {&reduce_requests, &gather_requests, &status_requests, &decision_requests}; }
  void reduce(void* const* blocks, const LocalMismatch& mismatch);
  ~State() { free_requests(); }

  // Copies the segments for which `which(owner)` holds between the blocks and the flat vector.
  template <class Which>
  void copy(void* const* blocks, bool to_flat, Which which) {
    for (const Segment& s : segments) {
      if (!which(s.owner) || s.count == 0) continue;
      std::byte* block = static_cast<std::byte*>(blocks[s.block]) + static_cast<std::size_t>(s.begin) * elem;
      const std::size_t n = static_cast<std::size_t>(s.count) * elem;
      if (to_flat)
        std::memcpy(at(s.flat), block, n);
      else
        std::memcpy(block, at(s.flat), n);
    }
  }
};

ShardExchange::ShardExchange(const Communicator& comm, FlatScalar scalar, TreeShape shape,
                             std::vector<ExchangeUnit> units, std::uint64_t max_piece_entries, bool options_valid,
                             const std::string& invalid)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.open(comm, scalar, "ZeroRedundancyOptimizer");
  s.shape = std::move(shape);

  // Per leaf, its first block and each block's first entry within the leaf.
  const std::size_t nleaves = s.shape.paths.size(), nblocks = s.shape.blocks.size();
  std::vector<std::size_t> first_block(nleaves + 1, nblocks);
  std::vector<std::int64_t> block_start(nblocks, 0);
  std::int64_t entries = 0;
  for (std::size_t j = nblocks; j-- > 0;) first_block[static_cast<std::size_t>(s.shape.blocks[j].leaf)] = j;
  for (std::size_t l = nleaves; l-- > 0;)
    if (first_block[l] == nblocks) first_block[l] = first_block[l + 1];
  for (std::size_t j = 0; j < nblocks; ++j) {
    const BlockShape& b = s.shape.blocks[j];
    block_start[j] = j > 0 && s.shape.blocks[j - 1].leaf == b.leaf
                         ? block_start[j - 1] + s.shape.blocks[j - 1].rows * s.shape.blocks[j - 1].cols
                         : 0;
    entries += b.rows * b.cols;
  }
  guarded(s.link, "ZeroRedundancyOptimizer", [&] {
    check_same_tree(s.link, s.shape, entries, scalar,
                    {"ZeroRedundancyOptimizer", "OwnershipOptions", "max_piece_entries", max_piece_entries,
                     options_valid, invalid});
  });

  s.region.assign(static_cast<std::size_t>(s.P) + 1, 0);
  std::int64_t flat = 0;
  for (int q = 0; q < s.P; ++q) {
    s.region[static_cast<std::size_t>(q)] = flat;
    for (const ExchangeUnit& u : units) {
      if (u.owner != q) continue;
      for (std::size_t j = first_block[static_cast<std::size_t>(u.leaf)];
           j < nblocks && s.shape.blocks[j].leaf == u.leaf; ++j) {
        const std::int64_t lo = block_start[j], hi = lo + s.shape.blocks[j].rows * s.shape.blocks[j].cols;
        const std::int64_t b = std::max(lo, u.begin), e = std::min(hi, u.end);
        if (e <= b) continue;
        s.segments.push_back({j, b - lo, e - b, flat, q});
        flat += e - b;
      }
    }
  }
  s.region[static_cast<std::size_t>(s.P)] = flat;
  s.flat.resize((static_cast<std::size_t>(flat) * s.elem + sizeof(double) - 1) / sizeof(double) + 1);
  s.status_in.assign(static_cast<std::size_t>(s.P) * kStatusWords, -1);
  s.contributions.resize(static_cast<std::size_t>(s.P));
  if (s.P == 1) return;

  const std::int64_t own = s.own();
  s.stage.resize((static_cast<std::size_t>(own) * static_cast<std::size_t>(s.P - 1) * s.elem + sizeof(double) - 1) /
                     sizeof(double) +
                 1);
  auto* stage = reinterpret_cast<std::byte*>(s.stage.data());
  // The leaf of the first unit each rank owns, the first path a wait for its region names.
  std::vector<std::int64_t> first_leaf(static_cast<std::size_t>(s.P), -1);
  for (const State::Segment& g : s.segments)
    if (first_leaf[static_cast<std::size_t>(g.owner)] < 0)
      first_leaf[static_cast<std::size_t>(g.owner)] = static_cast<std::int64_t>(s.shape.blocks[g.block].leaf);
  const std::int64_t own_leaf = first_leaf[static_cast<std::size_t>(s.rank)];
  // A status or decision message is about the whole step: it names this rank's first unit, else the peer's, else the
  // tree's first leaf.
  auto step_leaf = [&](std::int64_t theirs) {
    return own_leaf >= 0 ? own_leaf : theirs >= 0 ? theirs : s.shape.paths.empty() ? std::int64_t{-1} : 0;
  };
  s.decision_requests.assign(2 * static_cast<std::size_t>(s.P - 1), MPI_REQUEST_NULL);
  MPI_Request r;
  for (int q = 0, i = 0; q < s.P; ++q) {
    const std::int64_t their_leaf = first_leaf[static_cast<std::size_t>(q)];
    if (q != s.rank)
      s.decision_peers.insert(s.decision_peers.end(), {{q, true, step_leaf(their_leaf)}, {q, false, -1}});
    if (q == s.rank) continue;
    const std::int64_t theirs = s.region[static_cast<std::size_t>(q) + 1] - s.region[static_cast<std::size_t>(q)];
    std::byte* their_region = s.at(s.region[static_cast<std::size_t>(q)]);
    std::byte* own_region = s.at(s.region[static_cast<std::size_t>(s.rank)]);
    // Reduce: q's contribution to my units into the stage in rank order; mine to q's units.
    if (own > 0) {
      check(MPI_Recv_init(stage + static_cast<std::size_t>(i) * static_cast<std::size_t>(own) * s.elem,
                          static_cast<int>(own), s.type, q, kReduceTag, s.comm, &r),
            "MPI_Recv_init", s.comm);
      s.reduce_requests.push_back(r);
      s.reduce_peers.push_back({q, true, own_leaf});
    }
    if (theirs > 0) {
      check(MPI_Send_init(their_region, static_cast<int>(theirs), s.type, q, kReduceTag, s.comm, &r), "MPI_Send_init",
            s.comm);
      s.reduce_requests.push_back(r);
      s.reduce_peers.push_back({q, false, their_leaf});
    }
    // Gather: q's stepped units into the flat vector; mine to q.
    if (theirs > 0) {
      check(MPI_Recv_init(their_region, static_cast<int>(theirs), s.type, q, kGatherTag, s.comm, &r), "MPI_Recv_init",
            s.comm);
      s.gather_requests.push_back(r);
      s.gather_peers.push_back({q, true, their_leaf});
    }
    if (own > 0) {
      check(MPI_Send_init(own_region, static_cast<int>(own), s.type, q, kGatherTag, s.comm, &r), "MPI_Send_init",
            s.comm);
      s.gather_requests.push_back(r);
      s.gather_peers.push_back({q, false, own_leaf});
    }
    check(MPI_Recv_init(&s.status_in[static_cast<std::size_t>(q) * kStatusWords], kStatusWords, MPI_INT64_T, q,
                        kStatusTag, s.comm, &r),
          "MPI_Recv_init", s.comm);
    s.status_requests.push_back(r);
    s.status_peers.push_back({q, true, step_leaf(their_leaf)});
    check(MPI_Send_init(s.status_out, kStatusWords, MPI_INT64_T, q, kStatusTag, s.comm, &r), "MPI_Send_init", s.comm);
    s.status_requests.push_back(r);
    s.status_peers.push_back({q, false, their_leaf});
    s.bytes_sent += static_cast<std::size_t>(theirs + own) * s.elem;
    ++i;
  }
}

ShardExchange::~ShardExchange() = default;
ShardExchange::ShardExchange(ShardExchange&&) noexcept = default;
ShardExchange& ShardExchange::operator=(ShardExchange&&) noexcept = default;

const TreeShape& ShardExchange::shape() const noexcept { return state_->shape; }
std::size_t ShardExchange::bytes_sent_per_step() const noexcept { return state_->bytes_sent; }
int ShardExchange::rank() const noexcept { return state_->rank; }
int ShardExchange::size() const noexcept { return state_->P; }

void ShardExchange::reduce(void* const* blocks, const LocalMismatch& mismatch) {
  State& s = *state_;
  guarded(s.link, kStep, [&] { s.reduce(blocks, mismatch); });
}

void ShardExchange::State::reduce(void* const* blocks, const LocalMismatch& mismatch) {
  State& s = *this;
  const std::int64_t local[kStatusWords] = {mismatch.leaf, mismatch.block, mismatch.rows, mismatch.cols};
  std::copy(local, local + kStatusWords, s.status_out);
  std::copy(local, local + kStatusWords, &s.status_in[static_cast<std::size_t>(s.rank) * kStatusWords]);
  auto run = [&](std::vector<MPI_Request>& list) {
    if (list.empty()) return;
    check(MPI_Startall(static_cast<int>(list.size()), list.data()), "MPI_Startall", s.comm);
  };
  auto wait = [&](std::vector<MPI_Request>& list, const std::vector<Peer>& peers, const char* part) {
    link.wait(list.data(), static_cast<int>(list.size()), peers.data(), {kStep, part, &s.shape.paths});
  };
  const bool packable = mismatch.leaf < 0;
  run(s.status_requests);
  if (packable && s.P > 1) s.copy(blocks, true, [&](int owner) { return owner != s.rank; });
  run(s.reduce_requests);
  wait(s.status_requests, s.status_peers, "the status messages");
  wait(s.reduce_requests, s.reduce_peers, "the reduce of the gradients to their owners");
  for (int q = 0; q < s.P; ++q)
    if (s.status_in[static_cast<std::size_t>(q) * kStatusWords] >= 0)
      throw_status_mismatch(s.shape, s.status_in.data(), s.P, kStep, "the optimizer");
  if (s.P == 1) return;  // the mean of one gradient is itself
  const std::int64_t own = s.own();
  if (own == 0) return;
  std::byte* mine = s.at(s.region[static_cast<std::size_t>(s.rank)]);
  // My own contribution is read from the blocks, copied into my region first.
  s.copy(blocks, true, [&](int owner) { return owner == s.rank; });
  auto* stage = reinterpret_cast<std::byte*>(s.stage.data());
  for (int q = 0, i = 0; q < s.P; ++q)
    s.contributions[static_cast<std::size_t>(q)] =
        q == s.rank ? mine : stage + static_cast<std::size_t>(i++) * static_cast<std::size_t>(own) * s.elem;
  if (s.scalar == FlatScalar::float32)
    mean_in_rank_order(reinterpret_cast<float*>(mine), s.contributions.data(), s.P, own);
  else
    mean_in_rank_order(reinterpret_cast<double*>(mine), s.contributions.data(), s.P, own);
  s.copy(blocks, false, [&](int owner) { return owner == s.rank; });
}

void ShardExchange::gather(void* const* blocks) {
  State& s = *state_;
  guarded(s.link, kStep, [&] {
    if (s.P == 1) return;
    s.copy(blocks, true, [&](int owner) { return owner == s.rank; });
    if (!s.gather_requests.empty()) {
      check(MPI_Startall(static_cast<int>(s.gather_requests.size()), s.gather_requests.data()), "MPI_Startall", s.comm);
      s.link.wait(s.gather_requests.data(), static_cast<int>(s.gather_requests.size()), s.gather_peers.data(),
                  {kStep, "the gather of the stepped units from their owners", &s.shape.paths});
    }
    s.copy(blocks, false, [&](int owner) { return owner != s.rank; });
  });
}

void ShardExchange::all_gather(const void* mine, std::size_t bytes, void* all) {
  State& s = *state_;
  guarded(s.link, kStep, [&] {
    // Point-to-point, so that a wait that expires names the ranks whose decisions did not arrive; every rank calls
    // it in the same order, so MPI's non-overtaking rule matches the calls' messages without a sequence number.
    auto* out = static_cast<std::byte*>(all);
    std::memcpy(out + static_cast<std::size_t>(s.rank) * bytes, mine, bytes);
    for (int q = 0, i = 0; q < s.P; ++q) {
      if (q == s.rank) continue;
      check(MPI_Irecv(out + static_cast<std::size_t>(q) * bytes, static_cast<int>(bytes), MPI_BYTE, q, kDecisionTag,
                      s.comm, &s.decision_requests[static_cast<std::size_t>(i++)]),
            "MPI_Irecv", s.comm);
      check(MPI_Isend(mine, static_cast<int>(bytes), MPI_BYTE, q, kDecisionTag, s.comm,
                      &s.decision_requests[static_cast<std::size_t>(i++)]),
            "MPI_Isend", s.comm);
    }
    s.link.wait(s.decision_requests.data(), static_cast<int>(s.decision_requests.size()), s.decision_peers.data(),
                {kStep, "the all-gather of the step's decisions (gradient norm, non-finite leaves)", &s.shape.paths});
  });
}

}  // namespace geomopt::distributed::detail
