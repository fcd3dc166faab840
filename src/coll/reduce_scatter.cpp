// Reduce-scatter. Ring: block j travels from rank j + 1 around to rank j,
// each rank on the way adding its own block j, so every rank sends and
// receives (p - 1) blocks and reduces each once. Partial sums alternate
// between two scratch buffers, so that one can be sent while the next is
// computed. Blocks may differ in size (the v-form); empty ones still take
// their (empty) step, so every rank runs the same schedule.
// Recursive halving (small buffers, p a power of two): in step k each rank
// sends the half of its current range of blocks that its partner (rank xor
// p / 2^(k+1)) keeps and adds the partner's copy of the half it keeps, so
// after log2(p) steps it holds its own block, reduced. It moves the same
// bytes as the ring in log2(p) steps instead of p - 1.
#include "coll/collectives.hpp"

#include "reduce/reduce.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace chorus::coll {
namespace {

// What both schedules do first: nothing to exchange (one rank, or every
// block empty) means this rank's block is the input's. True when done.
bool nothing_to_exchange(const Collective& c, const void* send, void* recv,
                         std::span<const std::size_t> counts, DataType type) {
  const int p = c.transport.size(), r = c.transport.rank();
  const std::size_t largest = *std::max_element(counts.begin(), counts.end());
  if (p > 1 && largest > 0) return false;
  // Only a lone rank has a non-empty block here, and it is the first.
  const std::size_t mine = counts[static_cast<std::size_t>(r)] * size_of(type);
  if (mine && recv != send) std::memcpy(recv, send, mine);
  return true;
}

}  // namespace

void reduce_scatter_halving(const Collective& c, const void* send, void* recv,
                            std::span<const std::size_t> counts, DataType type, ReduceOp op,
                            unsigned phase) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  if ((p & (p - 1)) != 0)
    throw Error(ErrorCode::unsupported,
                fmt::format("reduce_scatter: recursive halving needs a power-of-two number of "
                            "ranks, not {}",
                            p));
  if (nothing_to_exchange(c, send, recv, counts, type)) return;
  const BlockLayout blocks = BlockLayout::packed(counts);
  const std::size_t esize = size_of(type);
  auto offset = [&](int j) { return j == p ? blocks.offset(p - 1, esize) + blocks.bytes(p - 1, esize)
                                           : blocks.offset(j, esize); };
  std::byte* work = c.scratch_buffer(0, offset(p));
  std::memcpy(work, send, offset(p));
  std::byte* incoming = c.scratch_buffer(1, offset(p));
  int low = 0, high = p;  // the blocks this rank still reduces
  unsigned step = 0;
  for (int mask = p / 2; mask > 0; mask /= 2, ++step) {
    const int middle = low + (high - low) / 2;
    const bool upper = (r & mask) != 0;
    const int keep_low = upper ? middle : low, keep_high = upper ? high : middle;
    const int give_low = upper ? low : middle, give_high = upper ? middle : high;
    const transport::Tag tag = c.message_tag(phase, step, 0);
    const std::size_t keep_bytes = offset(keep_high) - offset(keep_low);
    auto got = t.irecv(r ^ mask, tag, incoming, keep_bytes);
    auto sent = t.isend(r ^ mask, tag, work + offset(give_low), offset(give_high) - offset(give_low));
    c.wait(*got);
    if (keep_bytes)
      reduce::reduce(work + offset(keep_low), incoming, keep_bytes / esize, type, op);
    c.wait(*sent);
    low = keep_low;
    high = keep_high;
  }
  const std::size_t mine = blocks.bytes(r, esize);
  if (mine) std::memcpy(recv, work + offset(r), mine);
  if (op == ReduceOp::avg && mine) reduce::divide(recv, mine / esize, type, static_cast<std::size_t>(p));
}

void reduce_scatter_ring(const Collective& c, const void* send, void* recv,
                         std::span<const std::size_t> counts, DataType type, ReduceOp op,
                         unsigned phase) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  require_steps(p, "reduce_scatter");
  if (nothing_to_exchange(c, send, recv, counts, type)) return;
  const std::size_t esize = size_of(type);
  const BlockLayout blocks = BlockLayout::packed(counts);
  const auto* in = static_cast<const std::byte*>(send);
  auto mine = [&](int j) { return in + blocks.offset(j, esize); };
  const std::size_t my_count = blocks.counts[static_cast<std::size_t>(r)];
  const std::size_t largest = *std::max_element(counts.begin(), counts.end()) * esize;
  const int next = (r + 1) % p, prev = (r - 1 + p) % p;
  std::byte* partial[2] = {c.scratch_buffer(0, largest), c.scratch_buffer(1, largest)};
  std::byte* incoming = c.scratch_buffer(2, largest);
  const std::byte* outgoing = mine((r - 1 + p) % p);  // step 0 sends our own block r - 1
  for (int s = 0; s < p - 1; ++s) {
    const transport::Tag tag = c.message_tag(phase, static_cast<unsigned>(s), 0);
    const int leaving = (r - s - 1 + 2 * p) % p, arriving = (r - s - 2 + 2 * p) % p;
    auto in_flight = t.irecv(prev, tag, incoming, blocks.bytes(arriving, esize));
    auto sent = t.isend(next, tag, outgoing, blocks.bytes(leaving, esize));
    c.wait(*in_flight);
    // The last block to arrive is ours, finished: it goes straight to recv.
    std::byte* sum = s == p - 2 ? static_cast<std::byte*>(recv) : partial[s % 2];
    const std::size_t n = blocks.counts[static_cast<std::size_t>(arriving)];
    if (n) reduce::reduce(sum, mine(arriving), incoming, n, type, op);
    c.wait(*sent);
    outgoing = sum;
  }
  if (op == ReduceOp::avg && my_count)
    reduce::divide(recv, my_count, type, static_cast<std::size_t>(p));
}

}  // namespace chorus::coll
