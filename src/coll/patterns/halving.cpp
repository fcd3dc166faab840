#include "coll/patterns/halving.hpp"

#include "reduce/reduce.hpp"

namespace chorus::coll {

unsigned recursive_halving(const Collective& c, const RecursiveHalving& h, std::byte* work,
                           std::byte* incoming, unsigned step) {
  transport::Transport& t = c.transport;
  const std::size_t esize = size_of(h.type);
  auto offset = [&](int j) {  // bytes before block j; offset(p2) is the end
    return j == h.p2 ? h.blocks.offset(h.p2 - 1, esize) + h.blocks.bytes(h.p2 - 1, esize)
                     : h.blocks.offset(j, esize);
  };
  int low = 0, high = h.p2;  // the blocks this rank still reduces
  for (int mask = h.p2 / 2; mask > 0; mask /= 2, ++step) {
    const int middle = low + (high - low) / 2;
    const bool upper = (h.virtual_rank & mask) != 0;
    const int keep_low = upper ? middle : low, keep_high = upper ? high : middle;
    const int give_low = upper ? low : middle, give_high = upper ? middle : high;
    const int partner = h.real_rank(h.virtual_rank ^ mask);
    const transport::Tag tag = c.message_tag(h.phase, step, 0);
    const std::size_t keep_bytes = offset(keep_high) - offset(keep_low);
    auto got = t.irecv(partner, tag, incoming, keep_bytes);
    auto sent = t.isend(partner, tag, work + offset(give_low), offset(give_high) - offset(give_low));
    c.wait(*got);
    if (keep_bytes)
      reduce::reduce(work + offset(keep_low), incoming, keep_bytes / esize, h.type, h.op);
    c.wait(*sent);
    low = keep_low;
    high = keep_high;
  }
  return step;
}

}  // namespace chorus::coll
