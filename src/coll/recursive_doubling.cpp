#include "coll/recursive_doubling.hpp"

#include "coll/fold.hpp"
#include "common/copy.hpp"

#include "reduce/reduce.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

namespace chorus::coll {

void recursive_doubling_allreduce(const Collective& c, const void* send, void* recv,
                                  std::size_t count, DataType type, ReduceOp op) {
  transport::Transport& t = c.transport;
  const int p = t.size();
  const std::size_t bytes = count * size_of(type);
  if (send != recv) copy_memory(recv, send, bytes);
  if (p == 1) return;

  PowerOfTwoFold fold(c, recv, count, type, op);
  if (!fold.enter()) {
    fold.finish();  // the finished result comes back, already divided for avg
    return;
  }
  std::byte* incoming = c.scratch_buffer(0, bytes);
  unsigned step = 0;
  for (int mask = 1; mask < fold.p2(); mask <<= 1, ++step) {
    const int partner = fold.real_rank(fold.virtual_rank() ^ mask);
    const transport::Tag tag = c.message_tag(1, step, 0);
    auto in = t.irecv(partner, tag, incoming, bytes);
    auto out = t.isend(partner, tag, recv, bytes);
    c.wait(*in);
    c.wait(*out);  // recv is about to change under the send
    if (bytes) reduce::reduce(recv, incoming, count, type, op);
  }
  if (op == ReduceOp::avg && bytes) reduce::divide(recv, count, type, static_cast<std::size_t>(p));
  fold.finish();
}

double recursive_doubling_cost(const CostModel& m, double n, int ranks) {
  const double log_p2 = std::log2(std::bit_floor(static_cast<unsigned>(ranks)));
  return fold_cost(m, n, ranks) + log_p2 * (m.alpha + n * (m.beta + m.gamma));
}

}  // namespace chorus::coll
