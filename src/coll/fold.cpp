#include "coll/fold.hpp"

#include "reduce/reduce.hpp"

#include <bit>
#include <cmath>
#include <vector>

namespace chorus::coll {

PowerOfTwoFold::PowerOfTwoFold(const Collective& c, void* buf, std::size_t count, DataType type,
                               ReduceOp op)
    : c_(c), buf_(buf), count_(count), type_(type), op_(op) {
  const int p = c.transport.size(), r = c.transport.rank();
  while (p2_ * 2 <= p) p2_ *= 2;
  folded_ = p - p2_;
  virtual_rank_ = r < 2 * folded_ ? r / 2 : r - folded_;
}

bool PowerOfTwoFold::enter() {
  transport::Transport& t = c_.transport;
  const int r = t.rank();
  const std::size_t bytes = count_ * size_of(type_);
  if (r >= 2 * folded_) return true;
  if (r % 2 == 0) {
    c_.wait(*t.isend(r + 1, c_.message_tag(0, 0, 0), buf_, bytes));
    return false;
  }
  std::byte* incoming = c_.scratch_buffer(1, bytes);  // slot 0 is the algorithm's
  c_.wait(*t.irecv(r - 1, c_.message_tag(0, 0, 0), incoming, bytes));
  if (count_) reduce::reduce(buf_, incoming, count_, type_, op_);
  return true;
}

void PowerOfTwoFold::finish() {
  transport::Transport& t = c_.transport;
  const int r = t.rank();
  const std::size_t bytes = count_ * size_of(type_);
  if (r >= 2 * folded_) return;
  if (r % 2 == 0)
    c_.wait(*t.irecv(r + 1, c_.message_tag(0, 1, 0), buf_, bytes));
  else
    c_.wait(*t.isend(r - 1, c_.message_tag(0, 1, 0), buf_, bytes));
}

double fold_cost(const CostModel& m, double n, int ranks) {
  if (std::has_single_bit(static_cast<unsigned>(ranks))) return 0;
  return 2 * m.alpha + 2 * n * m.beta + n * m.gamma;
}

}  // namespace chorus::coll
