#include "coll/halving_doubling.hpp"

#include "coll/fold.hpp"

#include "reduce/reduce.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace chorus::coll {

void halving_doubling_allreduce(const Collective& c, const void* send, void* recv,
                                std::size_t count, DataType type, ReduceOp op) {
  transport::Transport& t = c.transport;
  const int p = t.size();
  const std::size_t esize = size_of(type);
  const std::size_t bytes = count * esize;
  auto* out = static_cast<std::byte*>(recv);
  if (send != recv && bytes) std::memcpy(out, send, bytes);
  if (p == 1) return;

  PowerOfTwoFold fold(c, out, count, type, op);
  if (!fold.enter()) {
    fold.finish();
    return;
  }
  const int p2 = fold.p2(), vr = fold.virtual_rank();
  auto real_rank = [&](int v) { return fold.real_rank(v); };
  std::byte* incoming = c.scratch_buffer(0, bytes);

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
    auto in = t.irecv(partner, c.message_tag(1, step, 0), incoming, keep_n * esize);
    auto sent =
        t.isend(partner, c.message_tag(1, step, 0), out + element(give_lo) * esize, give_n * esize);
    c.wait(*in);
    if (keep_n) reduce::reduce(out + element(keep_lo) * esize, incoming, keep_n, type, op);
    c.wait(*sent);
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
    c.wait(*in);
    c.wait(*sent);
    lo = std::min(lo, their_lo), hi = std::max(hi, their_hi);
  }

  fold.finish();
}

}  // namespace chorus::coll
