#include "coll/recursive_doubling.hpp"

#include "reduce/reduce.hpp"

#include <cstring>
#include <vector>

namespace chorus::coll {

void recursive_doubling_allreduce(const Collective& c, const void* send, void* recv,
                                  std::size_t count, DataType type, ReduceOp op) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  const std::size_t bytes = count * size_of(type);
  if (send != recv && bytes) std::memcpy(recv, send, bytes);
  if (p == 1) return;

  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  const int folded = p - p2;  // this many even ranks sit out the doubling
  std::vector<std::byte> incoming(bytes);
  auto exchange_and_reduce = [&](int partner, transport::Tag tag) {
    auto in = t.irecv(partner, tag, incoming.data(), bytes);
    auto out = t.isend(partner, tag, recv, bytes);
    t.wait(*in, c.deadline);
    t.wait(*out, c.deadline);  // recv is about to change under the send
    if (bytes) reduce::reduce(recv, incoming.data(), count, type, op);
  };

  // Fold: ranks 0, 2, ..., 2*folded-2 give their data to the next rank.
  if (r < 2 * folded && r % 2 == 0) {
    t.wait(*t.isend(r + 1, c.message_tag(0, 0, 0), recv, bytes), c.deadline);
    t.wait(*t.irecv(r + 1, c.message_tag(0, 1, 0), recv, bytes), c.deadline);
    return;  // the finished result came back, already divided for avg
  }
  if (r < 2 * folded) {
    auto in = t.irecv(r - 1, c.message_tag(0, 0, 0), incoming.data(), bytes);
    t.wait(*in, c.deadline);
    if (bytes) reduce::reduce(recv, incoming.data(), count, type, op);
  }

  // Doubling among p2 ranks, numbered without the folded ones.
  const int virtual_rank = r < 2 * folded ? r / 2 : r - folded;
  auto real_rank = [&](int v) { return v < folded ? 2 * v + 1 : v + folded; };
  unsigned step = 0;
  for (int mask = 1; mask < p2; mask <<= 1, ++step)
    exchange_and_reduce(real_rank(virtual_rank ^ mask), c.message_tag(1, step, 0));

  if (op == ReduceOp::avg && bytes) reduce::divide(recv, count, type, static_cast<std::size_t>(p));
  if (r < 2 * folded)  // hand the result back to the folded partner
    t.wait(*t.isend(r - 1, c.message_tag(0, 1, 0), recv, bytes), c.deadline);
}

}  // namespace chorus::coll
