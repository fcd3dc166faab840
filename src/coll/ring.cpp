// Ring AllReduce: the ring's reduce-scatter phase, then its allgather phase
// (coll/patterns/ring.hpp draws them), over p near-equal chunks of the
// buffer. Rank r finishes chunk (r + 1) % p and passes it on first.
#include "coll/ring.hpp"

#include "coll/patterns/ring.hpp"

#include <cstring>

namespace chorus::coll {

void ring_allreduce(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type, ReduceOp op) {
  const int p = c.transport.size();
  const std::size_t esize = size_of(type);
  auto* out = static_cast<std::byte*>(recv);
  const auto* in = static_cast<const std::byte*>(send);
  if (p == 1) {
    if (send != recv && count) std::memcpy(out, in, count * esize);
    return;  // avg over one rank divides by 1
  }
  const BlockLayout blocks = BlockLayout::near_equal(count, p);
  // Out of place, partial sums are made straight in recv (each chunk has its
  // place there) from what arrives and this rank's send; in place, what
  // arrives lands in scratch first.
  const int owned = (c.transport.rank() + 1) % p;
  ring_reduce_scatter(c, {.blocks = blocks,
                          .type = type,
                          .op = op,
                          .input = in,
                          .partial = [&](int j) { return out + blocks.offset(j, esize); },
                          .result = out + blocks.offset(owned, esize),
                          .finish = 1,
                          .phase = 0});
  ring_allgather(c, blocks, esize, out, 1, 1);
}

double ring_cost(const CostModel& m, double n, int ranks) {
  const double p = ranks, share = (p - 1) / p;  // of the buffer a rank reduces and sends per phase
  return 2 * (p - 1) * m.alpha + 2 * share * n * m.beta + share * n * m.gamma;
}

}  // namespace chorus::coll
