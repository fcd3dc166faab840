// Ring AllReduce: reduce-scatter then allgather around the ring, each chunk
// cut into segments that are forwarded as soon as they are reduced, so that
// sending segment k+1 overlaps reducing segment k. Bandwidth-optimal:
// 2(p-1)/p * n bytes sent per rank, 2(p-1) latency steps.
//
// Correct for every p >= 1, every count (chunks differ by at most one
// element; some may be empty), every dtype and op (ops must be supported:
// the caller checks), in place (send == recv) and out of place. Each chunk is
// reduced by exactly one rank in a fixed order and then copied, so every rank
// ends with bit-identical results. avg divides each chunk once, at its owner.
#pragma once

#include "coll/collective.hpp"
#include "coll/cost_model.hpp"

#include <chorus/types.hpp>

#include <cstddef>

namespace chorus::coll {

void ring_allreduce(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type, ReduceOp op);
// 2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma.
double ring_cost(const CostModel& m, double bytes, int ranks);

}  // namespace chorus::coll
