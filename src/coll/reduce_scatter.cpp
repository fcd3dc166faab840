// Reduce-scatter around the ring: block j travels from rank j + 1 around to
// rank j, each rank on the way adding its own block j, so every rank sends
// and receives (p - 1) blocks and reduces each once. Partial sums alternate
// between two scratch buffers, so that one can be sent while the next is
// computed.
#include "coll/collectives.hpp"

#include "reduce/reduce.hpp"

#include <cstring>

namespace chorus::coll {

void reduce_scatter(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type, ReduceOp op) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  require_steps(p, "reduce_scatter");
  const std::size_t block = count * size_of(type);
  const auto* in = static_cast<const std::byte*>(send);
  auto mine = [&](int j) { return in + static_cast<std::size_t>(j) * block; };
  if (p == 1 || block == 0) {
    if (block && recv != send) std::memcpy(recv, send, block);
    return;
  }
  const int next = (r + 1) % p, prev = (r - 1 + p) % p;
  std::byte* partial[2] = {c.scratch_buffer(0, block), c.scratch_buffer(1, block)};
  std::byte* incoming = c.scratch_buffer(2, block);
  const std::byte* outgoing = mine((r - 1 + p) % p);  // step 0 sends our own block r - 1
  for (int s = 0; s < p - 1; ++s) {
    const transport::Tag tag = c.message_tag(0, static_cast<unsigned>(s), 0);
    const int arriving = (r - s - 2 + 2 * p) % p;
    auto in_flight = t.irecv(prev, tag, incoming, block);
    auto sent = t.isend(next, tag, outgoing, block);
    c.wait(*in_flight);
    // The last block to arrive is ours, finished: it goes straight to recv.
    std::byte* sum = s == p - 2 ? static_cast<std::byte*>(recv) : partial[s % 2];
    reduce::reduce(sum, mine(arriving), incoming, count, type, op);
    c.wait(*sent);
    outgoing = sum;
  }
  if (op == ReduceOp::avg) reduce::divide(recv, count, type, static_cast<std::size_t>(p));
}

}  // namespace chorus::coll
