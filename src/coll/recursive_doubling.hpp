// Recursive-doubling AllReduce: log2(p) steps, each a pairwise exchange of
// the whole buffer with the partner whose rank differs in one bit. Fewest
// latency steps of all (the choice for tiny buffers), log2(p) * n bytes
// sent per rank.
//
// A rank count that is not a power of two is folded first (fold.hpp): of the first
// 2*(p - p2) ranks (p2 the largest power of two <= p), each even one hands
// its buffer to the odd one after it and waits for the result, which comes
// back at the end. Both partners of an exchange compute a op b, which is
// bitwise b op a for every supported op, so all ranks end bit-identical.
// Same contract as ring.hpp otherwise: any p >= 1, count, dtype, op, in
// place or not.
//
//   p = 4      step 0 (bit 0)     step 1 (bit 1)
//   rank 0  <-> rank 1         0 <-> 2          each exchange: the whole
//   rank 2  <-> rank 3         1 <-> 3          buffer, both ends reduce
#pragma once

#include "coll/collective.hpp"
#include "coll/cost_model.hpp"

#include <chorus/types.hpp>

#include <cstddef>

namespace chorus::coll {

void recursive_doubling_allreduce(const Collective& c, const void* send, void* recv,
                                  std::size_t count, DataType type, ReduceOp op);
double recursive_doubling_cost(const CostModel& m, double bytes, int ranks);

}  // namespace chorus::coll
