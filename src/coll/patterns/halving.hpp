// Recursive halving, written once (halving-doubling AllReduce's first half,
// reduce_scatter's recursive_halving): p2 = 2^k ranks, p2 blocks of `work`.
//
//   step 0 (mask 2): ranks 0<->2, 1<->3 swap halves: 0,1 keep blocks 0-1, 2,3 keep 2-3
//   step 1 (mask 1): ranks 0<->1, 2<->3 swap halves: each keeps its own block
//
// In each step a rank sends its partner (virtual rank xor mask) the half of
// its current range of blocks that the partner keeps, and adds the
// partner's copy of the half it keeps, so after log2(p2) steps block `vr`
// of `work` is reduced over all p2 ranks; every rank sends (p2 - 1) / p2
// of the buffer, as the ring does, in log2(p2) steps instead of p2 - 1.
#pragma once

#include "coll/collectives.hpp"

#include <chorus/types.hpp>

#include <functional>

namespace chorus::coll {

struct RecursiveHalving {
  const BlockLayout& blocks;  // p2 blocks of work
  int p2;                     // a power of two
  int virtual_rank;           // this rank among the p2
  std::function<int(int)> real_rank;  // transport rank of a virtual rank
  DataType type;
  ReduceOp op;
  unsigned phase = 0;
};
// `work` holds this rank's contribution to every block and is reduced in
// place; `incoming` has room for half of it. Uses steps first_step,
// first_step + 1, ... of the phase's tags; returns the next unused step.
unsigned recursive_halving(const Collective& c, const RecursiveHalving& halving, std::byte* work,
                           std::byte* incoming, unsigned first_step);

}  // namespace chorus::coll
