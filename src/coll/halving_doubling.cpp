#include "coll/halving_doubling.hpp"

#include "reduce/reduce.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace chorus::coll {

void halving_doubling_allreduce(const Collective& c, const void* send, void* recv,
                                std::size_t count, DataType type, ReduceOp op) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  const std::size_t esize = size_of(type);
  const std::size_t bytes = count * esize;
  auto* out = static_cast<std::byte*>(recv);
  if (send != recv && bytes) std::memcpy(out, send, bytes);
  if (p == 1) return;

  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  const int folded = p - p2;

  // Fold: ranks 0, 2, ..., 2*folded-2 give their data to the next rank and
  // get the finished result back at the end.
  if (r < 2 * folded && r % 2 == 0) {
    t.wait(*t.isend(r + 1, c.message_tag(0, 0, 0), out, bytes), c.deadline);
    t.wait(*t.irecv(r + 1, c.message_tag(0, 1, 0), out, bytes), c.deadline);
    return;
  }
  std::vector<std::byte> incoming(bytes);
  if (r < 2 * folded) {
    t.wait(*t.irecv(r - 1, c.message_tag(0, 0, 0), incoming.data(), bytes), c.deadline);
    if (count) reduce::reduce(out, incoming.data(), count, type, op);
  }
  const int vr = r < 2 * folded ? r / 2 : r - folded;
  auto real_rank = [&](int v) { return v < folded ? 2 * v + 1 : v + folded; };

  // Blocks: count split into p2 parts; [lo, hi) is a range of blocks.
  const auto blocks = static_cast<std::size_t>(p2);
  auto element = [&](std::size_t b) { return b * (count / blocks) + std::min(b, count % blocks); };
  std::size_t lo = 0, hi = blocks;
  unsigned step = 0;
  // Reduce-scatter by recursive halving: keep the half of the range that
  // holds our own block index, send the other half to the partner.
  for (int mask = p2 / 2; mask >= 1; mask /= 2, ++step) {
    const int partner = real_rank(vr ^ mask);
    const std::size_t mid = lo + (hi - lo) / 2;
    const bool keep_low = (vr & mask) == 0;
    const std::size_t keep_lo = keep_low ? lo : mid, keep_hi = keep_low ? mid : hi;
    const std::size_t give_lo = keep_low ? mid : lo, give_hi = keep_low ? hi : mid;
    const std::size_t keep_n = element(keep_hi) - element(keep_lo);
    const std::size_t give_n = element(give_hi) - element(give_lo);
    auto in = t.irecv(partner, c.message_tag(1, step, 0), incoming.data(), keep_n * esize);
    auto sent =
        t.isend(partner, c.message_tag(1, step, 0), out + element(give_lo) * esize, give_n * esize);
    t.wait(*in, c.deadline);
    if (keep_n) reduce::reduce(out + element(keep_lo) * esize, incoming.data(), keep_n, type, op);
    t.wait(*sent, c.deadline);
    lo = keep_lo, hi = keep_hi;
  }
  // Now [lo, hi) is our block vr, complete.
  if (op == ReduceOp::avg && element(hi) > element(lo))
    reduce::divide(out + element(lo) * esize, element(hi) - element(lo), type,
                   static_cast<std::size_t>(p));

  // Allgather by recursive doubling: exchange the ranges we hold; they double.
  for (int mask = 1; mask < p2; mask *= 2, ++step) {
    const int partner = real_rank(vr ^ mask);
    const std::size_t width = hi - lo;
    const bool we_are_low = (vr & mask) == 0;
    const std::size_t their_lo = we_are_low ? hi : lo - width, their_hi = their_lo + width;
    auto in = t.irecv(partner, c.message_tag(1, step, 0), out + element(their_lo) * esize,
                      (element(their_hi) - element(their_lo)) * esize);
    auto sent = t.isend(partner, c.message_tag(1, step, 0), out + element(lo) * esize,
                        (element(hi) - element(lo)) * esize);
    t.wait(*in, c.deadline);
    t.wait(*sent, c.deadline);
    lo = std::min(lo, their_lo), hi = std::max(hi, their_hi);
  }

  if (r < 2 * folded)  // hand the result back to the folded partner
    t.wait(*t.isend(r - 1, c.message_tag(0, 1, 0), out, bytes), c.deadline);
}

}  // namespace chorus::coll
