// Reduce-scatter. Ring: block j travels from rank j + 1 around to rank j,
// each rank on the way adding its own block j, so every rank sends and
// receives (p - 1) blocks and reduces each once; the ring's reduce-scatter
// phase (coll/patterns/ring.hpp, drawn there), segmented and pipelined as
// in AllReduce. Blocks may differ in size (the v-form); empty ones still
// take their (empty) step, so every rank runs the same schedule.
// Recursive halving (small buffers, p a power of two): in step k each rank
// sends the half of its current range of blocks that its partner (rank xor
// p / 2^(k+1)) keeps and adds the partner's copy of the half it keeps, so
// after log2(p) steps it holds its own block, reduced. It moves the same
// bytes as the ring in log2(p) steps instead of p - 1.
#include "coll/collectives.hpp"

#include "coll/patterns/halving.hpp"
#include "coll/patterns/ring.hpp"
#include "common/copy.hpp"
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
  if (recv != send) copy_memory(recv, send, mine);
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
  const std::size_t total = blocks.offset(p - 1, esize) + blocks.bytes(p - 1, esize);
  std::byte* work = c.scratch_buffer(0, total);
  copy_memory(work, send, total);
  recursive_halving(c,
                    {.blocks = blocks,
                     .p2 = p,
                     .virtual_rank = r,
                     .real_rank = [](int v) { return v; },
                     .type = type,
                     .op = op,
                     .phase = phase},
                    work, c.scratch_buffer(1, total), 0);
  const std::size_t mine = blocks.bytes(r, esize);
  copy_memory(recv, work + blocks.offset(r, esize), mine);
  if (op == ReduceOp::avg && mine) reduce::divide(recv, mine / esize, type, static_cast<std::size_t>(p));
}

void reduce_scatter_ring(const Collective& c, const void* send, void* recv,
                         std::span<const std::size_t> counts, DataType type, ReduceOp op,
                         unsigned phase) {
  if (nothing_to_exchange(c, send, recv, counts, type)) return;
  const std::size_t esize = size_of(type);
  const BlockLayout blocks = BlockLayout::packed(counts);
  // Partial sums of the blocks passing through this rank each have their
  // place in scratch, so any of them can still be on its way out while the
  // next is made (the ring pipelines segment by segment).
  std::byte* partials = c.scratch_buffer(0, blocks.offset(c.transport.size() - 1, esize) +
                                                blocks.bytes(c.transport.size() - 1, esize));
  ring_reduce_scatter(c, {.blocks = blocks,
                          .type = type,
                          .op = op,
                          .input = static_cast<const std::byte*>(send),
                          .partial = [&](int j) { return partials + blocks.offset(j, esize); },
                          .result = static_cast<std::byte*>(recv),
                          .finish = 0,
                          .phase = phase});
}

}  // namespace chorus::coll
