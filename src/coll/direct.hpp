// Direct AllReduce: every rank talks to every other at once (full bisection
// assumed), in one or two rounds.
//
//   one-shot: each rank sends its whole buffer to all others and reduces all
//             p contributions itself. 1 latency step, (p-1) * n bytes sent
//             per rank: for tiny buffers and few ranks.
//   two-shot: an all-to-all reduce-scatter (rank r reduces chunk r from
//             everyone), then an all-to-all allgather. 2 latency steps,
//             2(p-1)/p * n bytes per rank.
//
//   one-shot, p = 3:        two-shot, p = 3 (chunks A B C):
//     0 --all--> 1, 2         round 1: r sends chunk j to rank j
//     1 --all--> 0, 2                  (rank 0 reduces A, 1 B, 2 C)
//     2 --all--> 0, 1         round 2: r sends its reduced chunk to all
//
// Contributions are always combined in rank order 0, 1, ..., p-1, whatever
// order they arrive in, so every rank ends bit-identical. Same contract as
// ring.hpp otherwise.
#pragma once

#include "coll/collective.hpp"
#include "coll/cost_model.hpp"

#include <chorus/types.hpp>

#include <cstddef>

namespace chorus::coll {

void direct_one_shot_allreduce(const Collective& c, const void* send, void* recv, std::size_t count,
                               DataType type, ReduceOp op);
void direct_two_shot_allreduce(const Collective& c, const void* send, void* recv, std::size_t count,
                               DataType type, ReduceOp op);
double direct_one_shot_cost(const CostModel& m, double bytes, int ranks);
double direct_two_shot_cost(const CostModel& m, double bytes, int ranks);

}  // namespace chorus::coll
