// Dissemination barrier: in round k every rank signals rank + 2^k and waits
// for rank - 2^k; after ceil(log2 p) rounds each rank has heard, directly or
// not, from every other, whatever p is.
//
//   p = 5   round 0: r -> r+1   round 1: r -> r+2   round 2: r -> r+4 (mod 5)
#include "coll/collectives.hpp"

namespace chorus::coll {

void barrier(const Collective& c) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  unsigned round = 0;
  for (int distance = 1; distance < p; distance *= 2, ++round) {
    const transport::Tag tag = c.message_tag(0, round, 0);
    auto in = t.irecv((r - distance + p) % p, tag, nullptr, 0);
    auto out = t.isend((r + distance) % p, tag, nullptr, 0);
    c.wait(*in);
    c.wait(*out);
  }
}

}  // namespace chorus::coll
