// Reduce to one rank: a binomial tree towards the root. Each rank adds its
// children's partial results in a fixed order (nearest subtree first), so
// the result does not depend on timing.
#include "coll/collectives.hpp"

#include "reduce/reduce.hpp"

#include <cstring>

namespace chorus::coll {

void reduce_to_root(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type, ReduceOp op, int root) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank(), vr = (r - root + p) % p;
  const std::size_t bytes = count * size_of(type);
  // The partial result: in recv at the root, in scratch elsewhere.
  std::byte* partial = r == root ? static_cast<std::byte*>(recv) : c.scratch_buffer(0, bytes);
  if (bytes && partial != send) std::memcpy(partial, send, bytes);
  if (p == 1 || bytes == 0) return;
  std::byte* incoming = c.scratch_buffer(1, bytes);
  const transport::Tag tag = c.message_tag(0, 0, 0);  // one message per pair
  for (int mask = 1; mask < p; mask <<= 1) {
    if (vr & mask) {
      c.wait(*t.isend((vr - mask + root) % p, tag, partial, bytes));
      return;
    }
    if (vr + mask < p) {
      c.wait(*t.irecv((vr + mask + root) % p, tag, incoming, bytes));
      reduce::reduce(partial, incoming, count, type, op);
    }
  }
  if (op == ReduceOp::avg) reduce::divide(partial, count, type, static_cast<std::size_t>(p));
}

}  // namespace chorus::coll
