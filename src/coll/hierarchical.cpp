#include "coll/hierarchical.hpp"

#include "coll/patterns/chunks.hpp"
#include "coll/topology.hpp"
#include "common/copy.hpp"
#include "common/logging.hpp"
#include "reduce/reduce.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <vector>

namespace chorus::coll {
namespace {

using transport::RequestPtr;

// The stages of a piece (hierarchical.hpp), each its own tag segment.
enum Stage : unsigned { within = 0, across = 1, spread_across = 2, spread_within = 3 };

// When, counted from the step that starts a piece, each stage of it ends:
// piece i starts at step i, and at step t the pipeline ends stage A of piece
// t - 1, B of t - kEndAcross, ... so that two pieces are on the links while
// the oldest is waited for.
constexpr int kEndWithin = 1, kEndAcross = 3, kEndSpreadAcross = 4, kEndSpreadWithin = 5;
constexpr int kInFlight = kEndSpreadWithin + 1;  // pieces started and not ended, at most

// Pieces of kHierarchicalPieceBytes, larger on many ranks: a piece is
// cut into p messages (L shards of H sub-shards), each at least
// kHierarchicalMessageBytes.
std::size_t piece_bytes(const Collective& c) {
  return std::max(kHierarchicalPieceBytes,
                  kHierarchicalMessageBytes * static_cast<std::size_t>(c.transport.size()));
}

struct Range {
  std::size_t first = 0, count = 0;  // elements
};

Range part(Range whole, std::size_t parts, std::size_t index) {
  const NearEqualChunks chunks{whole.count, parts};
  return {whole.first + chunks.offset(index), chunks.size(index)};
}

class Pipeline {
 public:
  Pipeline(const Collective& c, const void* send, void* recv, std::size_t count, DataType type,
           ReduceOp op)
      : c_(c),
        topology_(*c.topology),
        me_(c.transport.rank()),
        host_(topology_.host_of(me_)),
        local_rank_(topology_.local_rank(me_)),
        local_(topology_.ranks_on(host_)),
        across_(topology_.peers_across_hosts(local_rank_)),
        type_(type),
        op_(op == ReduceOp::avg ? ReduceOp::sum : op),
        divide_by_(op == ReduceOp::avg ? static_cast<std::size_t>(c.transport.size()) : 0),
        esize_(size_of(type)),
        in_(static_cast<const std::byte*>(send)),
        out_(static_cast<std::byte*>(recv)),
        pieces_(std::clamp<std::size_t>(
            (count * esize_ + piece_bytes(c) - 1) / piece_bytes(c), 1, kMaxSteps)),
        count_(count) {
    const Range largest_piece = part({0, count}, pieces_, 0);
    const Range largest_shard = part(largest_piece, local_.size(), 0);
    largest_shard_ = largest_shard.count;
    largest_sub_ = part(largest_shard, across_.size(), 0).count;
    const std::size_t per_piece =
        ((local_.size() - 1) * largest_shard_ + (across_.size() - 1) * largest_sub_) * esize_;
    scratch_ = c.scratch_buffer(2, per_piece * kInFlight);
    scratch_per_piece_ = per_piece;
  }

  void run() {
    const int pieces = static_cast<int>(pieces_);
    for (int t = 0; t < pieces + kEndSpreadWithin; ++t) {
      if (t < pieces) start_within(t);
      if (in_range(t - kEndWithin)) end_within_start_across(t - kEndWithin);
      if (in_range(t - kEndAcross)) end_across_start_spread(t - kEndAcross);
      if (in_range(t - kEndSpreadAcross)) end_spread_across_start_within(t - kEndSpreadAcross);
      if (in_range(t - kEndSpreadWithin)) end(t - kEndSpreadWithin);
    }
  }

 private:
  struct Requests {
    std::vector<RequestPtr> receives, sends;
  };
  struct PieceState {
    std::array<Requests, 4> stage;  // by Stage
  };

  bool in_range(int piece) const { return piece >= 0 && piece < static_cast<int>(pieces_); }
  PieceState& state(int piece) { return in_flight_[static_cast<std::size_t>(piece) % kInFlight]; }
  Range piece_range(int piece) const { return part({0, count_}, pieces_, static_cast<std::size_t>(piece)); }
  Range shard(int piece, int local_rank) const {
    return part(piece_range(piece), local_.size(), static_cast<std::size_t>(local_rank));
  }
  Range sub_shard(int piece, int host) const {
    return part(shard(piece, local_rank_), across_.size(), static_cast<std::size_t>(host));
  }
  std::byte* out(Range r) const { return out_ + r.first * esize_; }
  const std::byte* in(Range r) const { return in_ + r.first * esize_; }
  // Piece `piece`'s scratch: local rank q's contribution (stage A; q is not
  // this rank), then host g's partial (stage B; g is not this host).
  std::byte* contribution(int piece, int q) const {
    const std::size_t slot = static_cast<std::size_t>(q < local_rank_ ? q : q - 1);
    return scratch_ + static_cast<std::size_t>(piece % kInFlight) * scratch_per_piece_ +
           slot * largest_shard_ * esize_;
  }
  std::byte* partial(int piece, int g) const {
    const std::size_t slot = static_cast<std::size_t>(g < host_ ? g : g - 1);
    return scratch_ + static_cast<std::size_t>(piece % kInFlight) * scratch_per_piece_ +
           ((local_.size() - 1) * largest_shard_ + slot * largest_sub_) * esize_;
  }
  transport::Tag tag(int piece, Stage stage) const {
    return c_.message_tag(0, static_cast<unsigned>(piece), stage);
  }
  RequestPtr send(int peer, int piece, Stage stage, const std::byte* from, std::size_t count) {
    return c_.transport.isend(peer, tag(piece, stage), from, count * esize_);
  }
  RequestPtr receive(int peer, int piece, Stage stage, std::byte* into, std::size_t count) {
    return c_.transport.irecv(peer, tag(piece, stage), into, count * esize_);
  }
  void wait_receives(Requests& r) {
    for (const RequestPtr& request : r.receives) c_.wait(*request);
  }
  void wait_sends(Requests& r) {
    if (!r.sends.empty()) c_.wait_all(r.sends);
    r.sends.clear();
  }
  // dst = a op b, elementwise (dst may be a or b).
  void combine(std::byte* dst, const std::byte* a, const std::byte* b, std::size_t count) const {
    if (count > 0) reduce::reduce(dst, a, b, count, type_, op_);
  }

  // A: every local rank's part of this rank's shard.
  void start_within(int piece) {
    Requests& r = state(piece).stage[within];
    r.receives.clear();
    const Range mine = shard(piece, local_rank_);
    for (int q = 0; q < static_cast<int>(local_.size()); ++q) {
      if (q == local_rank_) continue;
      const int peer = local_[static_cast<std::size_t>(q)];
      r.receives.push_back(receive(peer, piece, within, contribution(piece, q), mine.count));
      const Range theirs = shard(piece, q);
      r.sends.push_back(send(peer, piece, within, in(theirs), theirs.count));
    }
  }

  // End of A: the host's partial of this rank's shard, in place in recv
  // (this rank's own part first, then local ranks in order); then B.
  void end_within_start_across(int piece) {
    Requests& a = state(piece).stage[within];
    wait_receives(a);
    const Range mine = shard(piece, local_rank_);
    std::byte* sum = out(mine);
    if (local_.size() == 1) {
      if (sum != in(mine) && mine.count > 0) copy_memory(sum, in(mine), mine.count * esize_);
    }
    bool first = true;
    for (int q = 0; q < static_cast<int>(local_.size()); ++q) {
      if (q == local_rank_) continue;
      combine(sum, first ? in(mine) : sum, contribution(piece, q), mine.count);
      first = false;
    }
    Requests& b = state(piece).stage[across];
    b.receives.clear();
    const Range own_sub = sub_shard(piece, host_);
    for (int g = 0; g < static_cast<int>(across_.size()); ++g) {
      if (g == host_) continue;
      const int peer = across_[static_cast<std::size_t>(g)];
      b.receives.push_back(receive(peer, piece, across, partial(piece, g), own_sub.count));
      const Range theirs = sub_shard(piece, g);
      b.sends.push_back(send(peer, piece, across, out(theirs), theirs.count));
    }
  }

  // End of B: sub-shard `host_` of this rank's shard is final (this host's
  // partial first, then the hosts in order); then C.
  void end_across_start_spread(int piece) {
    Requests& b = state(piece).stage[across];
    wait_receives(b);
    const Range own_sub = sub_shard(piece, host_);
    std::byte* result = out(own_sub);
    for (int g = 0; g < static_cast<int>(across_.size()); ++g)
      if (g != host_) combine(result, result, partial(piece, g), own_sub.count);
    if (divide_by_ != 0 && own_sub.count > 0) reduce::divide(result, own_sub.count, type_, divide_by_);
    // C's receives land where B sent from.
    wait_sends(b);
    Requests& spread = state(piece).stage[spread_across];
    spread.receives.clear();
    for (int g = 0; g < static_cast<int>(across_.size()); ++g) {
      if (g == host_) continue;
      const int peer = across_[static_cast<std::size_t>(g)];
      const Range theirs = sub_shard(piece, g);
      spread.receives.push_back(receive(peer, piece, spread_across, out(theirs), theirs.count));
      spread.sends.push_back(send(peer, piece, spread_across, result, own_sub.count));
    }
  }

  // End of C: this rank's shard is final; then D.
  void end_spread_across_start_within(int piece) {
    Requests& spread = state(piece).stage[spread_across];
    wait_receives(spread);
    // D's receives land where A sent from (in place).
    wait_sends(state(piece).stage[within]);
    Requests& d = state(piece).stage[spread_within];
    d.receives.clear();
    const Range mine = shard(piece, local_rank_);
    for (int q = 0; q < static_cast<int>(local_.size()); ++q) {
      if (q == local_rank_) continue;
      const int peer = local_[static_cast<std::size_t>(q)];
      const Range theirs = shard(piece, q);
      d.receives.push_back(receive(peer, piece, spread_within, out(theirs), theirs.count));
      d.sends.push_back(send(peer, piece, spread_within, out(mine), mine.count));
    }
  }

  void end(int piece) {
    PieceState& s = state(piece);
    wait_receives(s.stage[spread_within]);
    for (Requests& r : s.stage) wait_sends(r);
  }

  const Collective& c_;
  const Topology& topology_;
  const int me_, host_, local_rank_;
  const std::vector<int>& local_;  // this host's ranks, by local rank
  const std::vector<int> across_;  // local rank l of every host, by host
  const DataType type_;
  const ReduceOp op_;
  const std::size_t divide_by_;  // p for avg, else 0
  const std::size_t esize_;
  const std::byte* const in_;
  std::byte* const out_;
  const std::size_t pieces_, count_;
  std::size_t largest_shard_ = 0, largest_sub_ = 0, scratch_per_piece_ = 0;
  std::byte* scratch_ = nullptr;
  std::array<PieceState, kInFlight> in_flight_;
};

// How many pieces of about kHierarchicalPieceBytes `bytes` are cut into
// (allgather, reduce-scatter, broadcast, reduce: one tag segment each).
std::size_t pieces_of(std::size_t bytes) {
  return std::clamp<std::size_t>((bytes + kHierarchicalPieceBytes - 1) / kHierarchicalPieceBytes,
                                 1, kMaxSegments);
}

// c.topology, or one host when it is null; throws for hosts of unequal rank counts.
const Topology& uniform_topology(const Collective& c, const Topology& one_host,
                                 std::string_view what) {
  if (c.topology == nullptr) return one_host;
  if (!c.topology->uniform())
    throw Error(ErrorCode::invalid_argument,
                fmt::format("hierarchical {} needs the same number of ranks on every host: {}",
                            what, c.topology->describe()));
  return *c.topology;
}

}  // namespace

void hierarchical_allreduce(const Collective& c, const void* send, void* recv, std::size_t count,
                            DataType type, ReduceOp op) {
  const Topology one_host = Topology::single_host(c.transport.size());
  Collective with_topology = c;
  with_topology.topology = &uniform_topology(c, one_host, "AllReduce");
  if (count == 0) return;
  const auto start = transport::Clock::now();
  Pipeline(with_topology, send, recv, count, type, op).run();
  if (log::enabled(log::Level::trace))
    log::trace("hierarchical allreduce #{} of {} bytes on {}: {:.2f} ms", c.sequence,
               count * size_of(type), with_topology.topology->describe(),
               std::chrono::duration<double, std::milli>(transport::Clock::now() - start).count());
}

void hierarchical_allgather(const Collective& c, const void* send, void* recv, std::size_t count,
                            DataType type) {
  const Topology one_host = Topology::single_host(c.transport.size());
  const Topology& topology = uniform_topology(c, one_host, "allgather");
  const std::size_t block = count * size_of(type);
  if (block == 0) return;
  transport::Transport& t = c.transport;
  const int me = t.rank(), host = topology.host_of(me), local_rank = topology.local_rank(me);
  const std::vector<int>& local = topology.ranks_on(host);
  const std::vector<int> across = topology.peers_across_hosts(local_rank);
  auto* out = static_cast<std::byte*>(recv);
  auto at = [&](int rank) { return out + static_cast<std::size_t>(rank) * block; };
  if (send != at(me)) copy_memory(at(me), send, block);
  // Blocks move in pieces (hierarchical.hpp), each forwarded within the
  // host as soon as it is here. Tags: phase 0 across hosts, 1 within; the
  // step is the host whose block it is, the segment the piece.
  const std::size_t pieces = pieces_of(block);
  const NearEqualChunks piece{block, pieces};
  auto tag = [&](unsigned phase, int of_host, std::size_t k) {
    return c.message_tag(phase, static_cast<unsigned>(of_host), static_cast<unsigned>(k));
  };
  std::vector<RequestPtr> sends, within;
  std::vector<std::vector<RequestPtr>> from_hosts(across.size());
  for (int g = 0; g < static_cast<int>(across.size()); ++g) {
    if (g == host) continue;
    const int peer = across[static_cast<std::size_t>(g)];
    for (std::size_t k = 0; k < pieces; ++k) {
      from_hosts[static_cast<std::size_t>(g)].push_back(
          t.irecv(peer, tag(0, g, k), at(peer) + piece.offset(k), piece.size(k)));
      sends.push_back(t.isend(peer, tag(0, host, k), at(me) + piece.offset(k), piece.size(k)));
    }
  }
  for (int q = 0; q < static_cast<int>(local.size()); ++q) {
    if (q == local_rank) continue;
    for (int g = 0; g < topology.hosts(); ++g) {
      const int owner = topology.ranks_on(g)[static_cast<std::size_t>(q)];
      for (std::size_t k = 0; k < pieces; ++k)
        within.push_back(t.irecv(local[static_cast<std::size_t>(q)], tag(1, g, k),
                                 at(owner) + piece.offset(k), piece.size(k)));
    }
  }
  auto forward = [&](int g, std::size_t k) {
    const int owner = across[static_cast<std::size_t>(g)];
    for (int q = 0; q < static_cast<int>(local.size()); ++q)
      if (q != local_rank)
        sends.push_back(t.isend(local[static_cast<std::size_t>(q)], tag(1, g, k),
                                at(owner) + piece.offset(k), piece.size(k)));
  };
  for (std::size_t k = 0; k < pieces; ++k) forward(host, k);
  // Piece by piece, host by host: every host's first pieces go on early.
  for (std::size_t k = 0; k < pieces; ++k)
    for (int g = 0; g < static_cast<int>(across.size()); ++g)
      if (g != host) {
        c.wait(*from_hosts[static_cast<std::size_t>(g)][k]);
        forward(g, k);
      }
  for (const RequestPtr& r : within) c.wait(*r);
  c.wait_all(sends);
}

void hierarchical_reduce_scatter(const Collective& c, const void* send, void* recv,
                                 std::size_t count, DataType type, ReduceOp op) {
  const Topology one_host = Topology::single_host(c.transport.size());
  const Topology& topology = uniform_topology(c, one_host, "reduce_scatter");
  if (count == 0) return;
  transport::Transport& t = c.transport;
  const std::size_t esize = size_of(type), block = count * esize;
  const int me = t.rank(), host = topology.host_of(me), local_rank = topology.local_rank(me);
  const int hosts = topology.hosts(), per_host = topology.local_size(me);
  const std::vector<int>& local = topology.ranks_on(host);
  const std::vector<int> across = topology.peers_across_hosts(local_rank);
  const ReduceOp sum_op = op == ReduceOp::avg ? ReduceOp::sum : op;
  const auto* in = static_cast<const std::byte*>(send);
  // The input's block for `rank`; the rank of local rank q on host g.
  auto block_for = [&](int rank) { return in + static_cast<std::size_t>(rank) * block; };
  auto rank_at = [&](int g, int q) {
    return topology.ranks_on(g)[static_cast<std::size_t>(q)];
  };
  const auto H = static_cast<std::size_t>(hosts), L = static_cast<std::size_t>(per_host);
  // Scratch: what each local rank q sent for local rank l's blocks (by q, then host g),
  // this host's partial of each of them (by g), and the other hosts' partials of this rank's block.
  std::byte* from_local = c.scratch_buffer(0, L * H * block);
  std::byte* partial = c.scratch_buffer(1, H * block);
  std::byte* from_hosts = c.scratch_buffer(2, H * block);
  auto at = [&](std::byte* base, std::size_t i) { return base + i * block; };

  const std::size_t pieces = pieces_of(block);
  const NearEqualChunks piece{count, pieces};
  // Tags: phase 0 within the host, 1 across; the step is the host of the
  // block's owner (within) or of the sender (across), the segment the piece.
  auto tag = [&](unsigned phase, int g, std::size_t k) {
    return c.message_tag(phase, static_cast<unsigned>(g), static_cast<unsigned>(k));
  };
  auto bytes_of_piece = [&](std::size_t k) { return piece.size(k) * esize; };
  auto offset_of_piece = [&](std::size_t k) { return piece.offset(k) * esize; };

  std::vector<RequestPtr> sends;
  // within[q][g][k], from_other_host[g][k]
  std::vector<RequestPtr> within(L * H * pieces), from_other_host(H * pieces);
  for (int q = 0; q < per_host; ++q) {
    if (q == local_rank) continue;
    for (int g = 0; g < hosts; ++g)
      for (std::size_t k = 0; k < pieces; ++k)
        within[(static_cast<std::size_t>(q) * H + static_cast<std::size_t>(g)) * pieces + k] =
            t.irecv(local[static_cast<std::size_t>(q)], tag(0, g, k),
                    at(from_local, static_cast<std::size_t>(q) * H + static_cast<std::size_t>(g)) +
                        offset_of_piece(k),
                    bytes_of_piece(k));
  }
  for (int g = 0; g < hosts; ++g) {
    if (g == host) continue;
    for (std::size_t k = 0; k < pieces; ++k)
      from_other_host[static_cast<std::size_t>(g) * pieces + k] =
          t.irecv(across[static_cast<std::size_t>(g)], tag(1, g, k),
                  at(from_hosts, static_cast<std::size_t>(g)) + offset_of_piece(k), bytes_of_piece(k));
  }
  // Within the host: every local rank gets, from each of the others, the
  // blocks of the ranks of its local rank on every host (the input: sent at
  // once), the other hosts' first: what crosses the links goes first, this
  // host's own blocks are needed only at the end. (In the 2 x 2 lab at
  // 1 Gbit/s, 32 MiB: 220-226 ms with them interleaved, against the link
  // bound of 134.)
  const auto other_hosts_first = [&](int i) { return (host + 1 + i) % hosts; };
  for (int i = 0; i < hosts; ++i)
    for (int q = 0; q < per_host; ++q) {
      if (q == local_rank) continue;
      const int g = other_hosts_first(i);
      for (std::size_t k = 0; k < pieces; ++k)
        sends.push_back(t.isend(local[static_cast<std::size_t>(q)], tag(0, g, k),
                                block_for(rank_at(g, q)) + offset_of_piece(k), bytes_of_piece(k)));
    }
  // The same order: host g's partial of the block of local rank l there, the
  // host's ranks' contributions in local-rank order, sent across as soon as
  // it is reduced.
  for (int i = 0; i < hosts; ++i)
    for (std::size_t k = 0; k < pieces; ++k) {
      const int g = other_hosts_first(i);
      std::byte* out = at(partial, static_cast<std::size_t>(g)) + offset_of_piece(k);
      auto contribution = [&](int q) -> const std::byte* {
        if (q == local_rank) return block_for(rank_at(g, local_rank)) + offset_of_piece(k);
        const std::size_t i = static_cast<std::size_t>(q) * H + static_cast<std::size_t>(g);
        c.wait(*within[i * pieces + k]);
        return at(from_local, i) + offset_of_piece(k);
      };
      if (per_host == 1) {
        copy_memory(out, contribution(0), bytes_of_piece(k));
      } else {
        reduce::reduce(out, contribution(0), contribution(1), piece.size(k), type, sum_op);
        for (int q = 2; q < per_host; ++q)
          reduce::reduce(out, contribution(q), piece.size(k), type, sum_op);
      }
      if (g != host)
        sends.push_back(t.isend(across[static_cast<std::size_t>(g)], tag(1, host, k), out,
                                bytes_of_piece(k)));
    }
  // Across hosts: this rank's block, the hosts' partials in host order.
  auto* result = static_cast<std::byte*>(recv);
  for (std::size_t k = 0; k < pieces; ++k) {
    auto from = [&](int g) -> const std::byte* {
      if (g == host) return at(partial, static_cast<std::size_t>(g)) + offset_of_piece(k);
      c.wait(*from_other_host[static_cast<std::size_t>(g) * pieces + k]);
      return at(from_hosts, static_cast<std::size_t>(g)) + offset_of_piece(k);
    };
    std::byte* out = result + offset_of_piece(k);
    if (hosts == 1) {
      copy_memory(out, from(0), bytes_of_piece(k));
    } else {
      reduce::reduce(out, from(0), from(1), piece.size(k), type, sum_op);
      for (int g = 2; g < hosts; ++g) reduce::reduce(out, from(g), piece.size(k), type, sum_op);
    }
    if (op == ReduceOp::avg)
      reduce::divide(out, piece.size(k), type, static_cast<std::size_t>(t.size()));
  }
  c.wait_all(sends);
}

namespace {

// The broadcast's and the reduce's view of one call: pieces of the
// buffer, each cut into L shards; local rank q of every host carries shard
// q of every piece; the hosts form a chain in host order (tags: phase 0
// across hosts, 1 within; the step is the shard, the segment the piece).
struct ShardedChain {
  ShardedChain(const Collective& c, const Topology& topology, std::size_t count, DataType type,
               int root)
      : c(c),
        me(c.transport.rank()),
        host(topology.host_of(me)),
        local_rank(topology.local_rank(me)),
        hosts(topology.hosts()),
        root_host(topology.host_of(root)),
        local(topology.ranks_on(host)),
        across(topology.peers_across_hosts(local_rank)),
        esize(size_of(type)),
        pieces(pieces_of(count * esize)),
        piece{count, pieces} {}

  Range shard(std::size_t k, int q) const {
    return part({piece.offset(k), piece.size(k)}, local.size(), static_cast<std::size_t>(q));
  }
  std::size_t bytes(Range r) const { return r.count * esize; }
  transport::Tag tag(unsigned phase, int q, std::size_t k) const {
    return c.message_tag(phase, static_cast<unsigned>(q), static_cast<unsigned>(k));
  }
  // Local rank q of the host `step` hosts after this one along the chain.
  int across_by(int step) const {
    return across[static_cast<std::size_t>(((host + step) % hosts + hosts) % hosts)];
  }

  static constexpr unsigned kAcross = 0, kWithin = 1;
  const Collective& c;
  const int me, host, local_rank, hosts, root_host;
  const std::vector<int>& local;  // this host's ranks, by local rank
  const std::vector<int> across;  // this local rank on every host, by host
  const std::size_t esize, pieces;
  const NearEqualChunks piece;    // elements per piece
};

}  // namespace

void hierarchical_broadcast(const Collective& c, void* buffer, std::size_t count, DataType type,
                            int root) {
  const Topology one_host = Topology::single_host(c.transport.size());
  const Topology& topology = uniform_topology(c, one_host, "broadcast");
  if (count == 0) return;
  transport::Transport& t = c.transport;
  const ShardedChain s(c, topology, count, type, root);
  const int root_local = topology.local_rank(root);
  const bool on_root_host = s.host == s.root_host;
  // Where this host is on the chain (0: the root's) and who is next.
  const int position = (s.host - s.root_host + s.hosts) % s.hosts;
  const int next = position + 1 < s.hosts ? s.across_by(1) : -1;
  auto* data = static_cast<std::byte*>(buffer);
  auto at = [&](Range r) { return data + r.first * s.esize; };
  const std::size_t pieces = s.pieces;

  std::vector<RequestPtr> sends, receives, own(pieces);
  // This rank's shard from the root (on its host) or from the previous host;
  // the other shards from their holders here (the root holds every one).
  if (s.me != root) {
    const int from = on_root_host ? root : s.across_by(-1);
    const unsigned phase = on_root_host ? ShardedChain::kWithin : ShardedChain::kAcross;
    for (std::size_t k = 0; k < pieces; ++k) {
      const Range mine = s.shard(k, s.local_rank);
      own[k] = t.irecv(from, s.tag(phase, s.local_rank, k), at(mine), s.bytes(mine));
      for (int q = 0; q < static_cast<int>(s.local.size()); ++q)
        if (q != s.local_rank) {
          const Range theirs = s.shard(k, q);
          receives.push_back(t.irecv(s.local[static_cast<std::size_t>(q)],
                                     s.tag(ShardedChain::kWithin, q, k), at(theirs),
                                     s.bytes(theirs)));
        }
    }
  }
  // Shard `local_rank` of piece k is here: on along the chain and to this
  // host's other ranks (not the root, which has it).
  auto forward = [&](std::size_t k) {
    const Range mine = s.shard(k, s.local_rank);
    if (next >= 0)
      sends.push_back(t.isend(next, s.tag(ShardedChain::kAcross, s.local_rank, k), at(mine),
                              s.bytes(mine)));
    for (int q = 0; q < static_cast<int>(s.local.size()); ++q) {
      const int peer = s.local[static_cast<std::size_t>(q)];
      if (q != s.local_rank && peer != root)
        sends.push_back(t.isend(peer, s.tag(ShardedChain::kWithin, s.local_rank, k), at(mine),
                                s.bytes(mine)));
    }
  };
  for (std::size_t k = 0; k < pieces; ++k) {
    if (s.me == root) {
      for (int q = 0; q < static_cast<int>(s.local.size()); ++q)
        if (q != root_local) {
          const Range theirs = s.shard(k, q);
          sends.push_back(t.isend(s.local[static_cast<std::size_t>(q)],
                                  s.tag(ShardedChain::kWithin, q, k), at(theirs),
                                  s.bytes(theirs)));
        }
    } else {
      c.wait(*own[k]);
    }
    forward(k);
  }
  for (const RequestPtr& r : receives) c.wait(*r);
  c.wait_all(sends);
}

void hierarchical_reduce(const Collective& c, const void* send, void* recv, std::size_t count,
                         DataType type, ReduceOp op, int root) {
  const Topology one_host = Topology::single_host(c.transport.size());
  const Topology& topology = uniform_topology(c, one_host, "reduce");
  if (count == 0) return;
  transport::Transport& t = c.transport;
  const ShardedChain s(c, topology, count, type, root);
  const ReduceOp sum_op = op == ReduceOp::avg ? ReduceOp::sum : op;
  const int per_host = static_cast<int>(s.local.size());
  // The chain runs from the host after the root's to the root's (last).
  const int position = (s.host - s.root_host - 1 + 2 * s.hosts) % s.hosts;
  const int previous = position > 0 ? s.across_by(-1) : -1;
  const int next = position + 1 < s.hosts ? s.across_by(1) : -1;
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const std::size_t pieces = s.pieces;

  // This rank's shards of all pieces, packed: offsets into the scratch.
  std::vector<std::size_t> packed(pieces + 1, 0);
  for (std::size_t k = 0; k < pieces; ++k)
    packed[k + 1] = packed[k] + s.shard(k, s.local_rank).count;
  const std::size_t mine_bytes = packed[pieces] * s.esize;
  // The partial of shard local_rank: the root's in recv; else scratch. (In
  // place, the root's input shard is copied aside first, so that its ranks
  // are added in local-rank order there too.)
  const bool in_place = s.me == root && send == recv;
  std::byte* partials = s.me == root && !in_place ? nullptr : c.scratch_buffer(0, mine_bytes);
  std::byte* contributions =
      c.scratch_buffer(1, static_cast<std::size_t>(per_host - 1) * mine_bytes);
  std::byte* from_chain = c.scratch_buffer(2, mine_bytes);
  auto partial = [&](std::size_t k) {
    return s.me == root ? out + s.shard(k, s.local_rank).first * s.esize
                        : partials + packed[k] * s.esize;
  };
  auto contribution = [&](int q, std::size_t k) {
    const auto slot = static_cast<std::size_t>(q < s.local_rank ? q : q - 1);
    return contributions + slot * mine_bytes + packed[k] * s.esize;
  };

  std::vector<RequestPtr> sends, within((static_cast<std::size_t>(per_host)) * pieces),
      chain(pieces);
  for (std::size_t k = 0; k < pieces; ++k) {
    const Range mine = s.shard(k, s.local_rank);
    for (int q = 0; q < per_host; ++q)
      if (q != s.local_rank)
        within[static_cast<std::size_t>(q) * pieces + k] =
            t.irecv(s.local[static_cast<std::size_t>(q)],
                    s.tag(ShardedChain::kWithin, s.local_rank, k), contribution(q, k),
                    s.bytes(mine));
    if (previous >= 0)
      chain[k] = t.irecv(previous, s.tag(ShardedChain::kAcross, s.local_rank, k),
                         from_chain + packed[k] * s.esize, s.bytes(mine));
  }
  // Every local rank's shard q of this rank's input to local rank q.
  for (std::size_t k = 0; k < pieces; ++k)
    for (int q = 0; q < per_host; ++q)
      if (q != s.local_rank) {
        const Range theirs = s.shard(k, q);
        sends.push_back(t.isend(s.local[static_cast<std::size_t>(q)],
                                s.tag(ShardedChain::kWithin, q, k), in + theirs.first * s.esize,
                                s.bytes(theirs)));
      }
  // The root receives the final shards into recv once its own input there
  // has been sent (in place, the same memory).
  std::vector<RequestPtr> finals;
  auto receive_finals = [&] {
    c.wait_all(sends);
    sends.clear();
    for (std::size_t k = 0; k < pieces; ++k)
      for (int q = 0; q < per_host; ++q)
        if (q != s.local_rank) {
          const Range theirs = s.shard(k, q);
          finals.push_back(t.irecv(s.local[static_cast<std::size_t>(q)],
                                   s.tag(ShardedChain::kWithin, q, k),
                                   out + theirs.first * s.esize, s.bytes(theirs)));
        }
  };
  for (std::size_t k = 0; k < pieces; ++k) {
    const Range mine = s.shard(k, s.local_rank);
    std::byte* sum = partial(k);
    for (int q = 0; q < per_host; ++q)
      if (q != s.local_rank) c.wait(*within[static_cast<std::size_t>(q) * pieces + k]);
    if (in_place && mine.count > 0)
      copy_memory(partials + packed[k] * s.esize, in + mine.first * s.esize, s.bytes(mine));
    auto from = [&](int q) -> const std::byte* {
      if (q != s.local_rank) return contribution(q, k);
      return in_place ? partials + packed[k] * s.esize : in + mine.first * s.esize;
    };
    // This host's ranks in local-rank order, then the chain's partial first.
    if (per_host == 1) {
      if (sum != from(0) && mine.count > 0) copy_memory(sum, from(0), s.bytes(mine));
    } else if (mine.count > 0) {
      reduce::reduce(sum, from(0), from(1), mine.count, type, sum_op);
      for (int q = 2; q < per_host; ++q) reduce::reduce(sum, from(q), mine.count, type, sum_op);
    }
    if (previous >= 0) {
      c.wait(*chain[k]);
      if (mine.count > 0)
        reduce::reduce(sum, from_chain + packed[k] * s.esize, sum, mine.count, type, sum_op);
    }
    if (next >= 0) {
      sends.push_back(
          t.isend(next, s.tag(ShardedChain::kAcross, s.local_rank, k), sum, s.bytes(mine)));
    } else if (s.me != root) {
      sends.push_back(t.isend(root, s.tag(ShardedChain::kWithin, s.local_rank, k), sum,
                              s.bytes(mine)));
    }
    if (s.me == root && k == 0) receive_finals();
  }
  for (const RequestPtr& r : finals) c.wait(*r);
  c.wait_all(sends);
  if (s.me == root && op == ReduceOp::avg)
    reduce::divide(out, count, type, static_cast<std::size_t>(t.size()));
}

}  // namespace chorus::coll
