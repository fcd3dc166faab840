// Folding a rank count that is not a power of two, for the algorithms that
// pair ranks by the bits of their numbers (recursive doubling,
// halving-doubling). With p2 the largest power of two <= p, the first
// 2(p - p2) ranks pair up: the even one hands its buffer to the odd one,
// which reduces it in, and later gets the finished result back. The p2 ranks
// left are numbered 0..p2-1 ("virtual" ranks).
#pragma once

#include "coll/collective.hpp"
#include "coll/cost_model.hpp"

#include <chorus/types.hpp>

#include <cstddef>

namespace chorus::coll {

class PowerOfTwoFold {
 public:
  PowerOfTwoFold(const Collective& c, void* buf, std::size_t count, DataType type, ReduceOp op);

  // Folds this rank in. False for a rank that sits out: it has handed its
  // data over and must only call finish().
  bool enter();
  // Gives the finished result in `buf` back to (or takes it from) the partner.
  void finish();

  int p2() const noexcept { return p2_; }
  int virtual_rank() const noexcept { return virtual_rank_; }
  int real_rank(int virtual_rank) const noexcept {
    return virtual_rank < folded_ ? 2 * virtual_rank + 1 : virtual_rank + folded_;
  }

 private:
  const Collective& c_;
  void* buf_;
  std::size_t count_;
  DataType type_;
  ReduceOp op_;
  int p2_ = 1;
  int folded_ = 0;
  int virtual_rank_ = 0;
};

}  // namespace chorus::coll
