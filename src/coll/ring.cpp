// Ring AllReduce: the ring's reduce-scatter phase, then its allgather phase
// (coll/patterns/ring.hpp draws them), over p near-equal chunks of the
// buffer. Rank r finishes chunk (r + 1) % p and passes it on first (r: its
// position on the ring, which across hosts keeps each host's ranks together).
#include "coll/ring.hpp"

#include "coll/patterns/ring.hpp"
#include "coll/topology.hpp"
#include "common/copy.hpp"

#include <cstring>

namespace chorus::coll {

void ring_allreduce(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type, ReduceOp op) {
  const int p = c.transport.size();
  const std::size_t esize = size_of(type);
  auto* out = static_cast<std::byte*>(recv);
  const auto* in = static_cast<const std::byte*>(send);
  if (p == 1) {
    if (send != recv) copy_memory(out, in, count * esize);
    return;  // avg over one rank divides by 1
  }
  const BlockLayout blocks = BlockLayout::near_equal(count, p);
  // Across hosts whose ranks are not consecutive (dealt round-robin), the
  // ring runs in host order, each host's ranks together, so that it leaves
  // each host once instead of at every step.
  std::vector<int> order;
  if (c.topology != nullptr && c.topology->ring_edges_leaving_a_host() > 1)
    order = c.topology->host_order();
  const std::vector<int>* in_order = order.empty() ? nullptr : &order;
  const int position = ring_position(c.transport, in_order);
  // Out of place, partial sums are made straight in recv (each chunk has its
  // place there) from what arrives and this rank's send; in place, what
  // arrives lands in scratch first.
  //
  // In place the block a rank finishes turns with the call (its sequence
  // number, which every rank knows), and the final sum goes straight into
  // the input. The block a rank finished before was read by its successor
  // in the last call's allgather; summing into lines a peer holds loads
  // each shared and then takes it back, so the sum went to scratch and was
  // copied over (ring_reduce_scatter). Turned, each rank finishes the block
  // it received last in the call before's allgather and did not forward:
  // lines it holds alone, no copy (in place / out of place, p = 2, 1 and 4
  // MiB, 6 runs: 1.31 / 1.31 -> 1.05 / 1.11, with --rewrite 1.01 / 1.05 ->
  // 0.99 / 1.02; docs/performance.md "Tenth pass"). The partial sums of the
  // steps before (p > 2) are forwarded from the input's place, lines the
  // successor read: those still land in scratch.
  const int shift = send == recv ? static_cast<int>(c.sequence % static_cast<std::uint64_t>(p)) : 0;
  const int owned = (position + 1 + shift) % p;
  ring_reduce_scatter(c, {.blocks = blocks,
                          .type = type,
                          .op = op,
                          .input = in,
                          .partial = [&](int j) { return out + blocks.offset(j, esize); },
                          .result = out + blocks.offset(owned, esize),
                          .finish = 1 + shift,
                          .phase = 0,
                          .order = in_order,
                          .result_into_input = send == recv});
  ring_allgather(c, blocks, esize, out, 1 + shift, 1, nullptr, in_order);
}

double ring_cost(const CostModel& m, double n, int ranks) {
  const double p = ranks, share = (p - 1) / p;  // of the buffer a rank reduces and sends per phase
  return 2 * (p - 1) * m.alpha + 2 * share * n * m.beta + share * n * m.gamma;
}

}  // namespace chorus::coll
