// Allgather around the ring: in step s every rank passes on the block it
// received in step s - 1 (its own first), so after p - 1 steps every rank
// has every block; each rank sends and receives (p - 1) blocks, the least
// possible. Blocks land straight in recv.
#include "coll/collectives.hpp"

#include <cstring>

namespace chorus::coll {

void allgather(const Collective& c, const void* send, void* recv, std::size_t count,
               DataType type) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  require_steps(p, "allgather");
  const std::size_t block = count * size_of(type);
  auto* out = static_cast<std::byte*>(recv);
  auto at = [&](int j) { return out + static_cast<std::size_t>(j) * block; };
  if (block && at(r) != send) std::memcpy(at(r), send, block);
  if (p == 1 || block == 0) return;
  const int next = (r + 1) % p, prev = (r - 1 + p) % p;
  for (int s = 0; s < p - 1; ++s) {
    const transport::Tag tag = c.message_tag(0, static_cast<unsigned>(s), 0);
    const int outgoing = (r - s + p) % p, incoming = (r - s - 1 + 2 * p) % p;
    auto in = t.irecv(prev, tag, at(incoming), block);
    auto sent = t.isend(next, tag, at(outgoing), block);
    c.wait(*in);
    c.wait(*sent);
  }
}

}  // namespace chorus::coll
