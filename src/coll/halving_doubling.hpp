// Halving-doubling AllReduce (Rabenseifner): a reduce-scatter by recursive
// halving (each step exchanges half of what is left with the partner whose
// rank differs in one bit), then an allgather by recursive doubling.
// 2 log2(p) latency steps and 2(p-1)/p * n bytes per rank: ring's bandwidth
// with far fewer steps, for mid to large buffers on few ranks.
//
// A rank count that is not a power of two is folded first, exactly as in
// recursive_doubling.hpp (fold.hpp). Each block is reduced by one rank in a fixed
// order and then copied, so all ranks end bit-identical. Same contract as
// ring.hpp otherwise.
//
//   p = 4, blocks A B C D      halving (patterns/halving.hpp)   doubling
//   step 0: 0<->2, 1<->3       keep A B | C D                   step 2: 0<->1, 2<->3
//   step 1: 0<->1, 2<->3       keep A | B | C | D (reduced)     step 3: 0<->2, 1<->3
//                                                                (held blocks double)
#pragma once

#include "coll/collective.hpp"
#include "coll/cost_model.hpp"

#include <chorus/types.hpp>

#include <cstddef>

namespace chorus::coll {

void halving_doubling_allreduce(const Collective& c, const void* send, void* recv,
                                std::size_t count, DataType type, ReduceOp op);
double halving_doubling_cost(const CostModel& m, double bytes, int ranks);

}  // namespace chorus::coll
