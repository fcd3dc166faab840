#include "coll/halving_doubling.hpp"

#include "coll/fold.hpp"
#include "coll/patterns/halving.hpp"
#include "common/copy.hpp"

#include "reduce/reduce.hpp"

#include <bit>
#include <cmath>
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
  if (send != recv) copy_memory(out, send, bytes);
  if (p == 1) return;

  PowerOfTwoFold fold(c, out, count, type, op);
  if (!fold.enter()) {
    fold.finish();
    return;
  }
  // In place, the virtual ranks are relabelled (xor p2 / 2) every other
  // call: each rank then keeps, at the first halving step, the half it
  // received in the last doubling step of the call before, lines it holds
  // alone, instead of the half its partner has just read (ring_allreduce
  // says why that is slow). Out of place, the copy above takes every line
  // back anyway. Xor keeps the hypercube: partners stay partners.
  const int relabel = send == recv && c.sequence % 2 == 1 ? fold.p2() / 2 : 0;
  const int p2 = fold.p2(), vr = fold.virtual_rank() ^ relabel;
  auto real_rank = [&](int v) { return fold.real_rank(v ^ relabel); };
  std::byte* incoming = c.scratch_buffer(0, bytes);

  // Blocks: count split into p2 parts; [lo, hi) is a range of blocks.
  const BlockLayout layout = BlockLayout::near_equal(count, p2);
  auto element = [&](std::size_t b) {
    return b == layout.displs.size() ? count : layout.displs[b];
  };
  // Reduce-scatter by recursive halving (patterns/halving.hpp): block vr.
  unsigned step = recursive_halving(c,
                                    {.blocks = layout,
                                     .p2 = p2,
                                     .virtual_rank = vr,
                                     .real_rank = real_rank,
                                     .type = type,
                                     .op = op,
                                     .phase = 1},
                                    out, incoming, 0);
  std::size_t lo = static_cast<std::size_t>(vr), hi = lo + 1;
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

double halving_doubling_cost(const CostModel& m, double n, int ranks) {
  const int p2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(ranks)));
  const double s2 = (p2 - 1.0) / p2, log_p2 = std::log2(p2);
  return fold_cost(m, n, ranks) + 2 * log_p2 * m.alpha + 2 * s2 * n * m.beta + s2 * n * m.gamma;
}

}  // namespace chorus::coll
