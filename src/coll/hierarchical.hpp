// Hierarchical AllReduce, for ranks on several hosts, where each host's
// network link is the bottleneck:
//
//   host A: a0 a1        1. within each host, a ring reduce-scatter: local
//   host B: b0 b1           rank l holds shard l of its host's sum
//                        2. across hosts, the ranks of local rank l (a_l,
//                           b_l, ...) all-reduce shard l: L AllReduces at
//                           once, one per local rank, each moving 1/L of
//                           the buffer, so every local rank drives its share
//                           of the host's link
//                        3. within each host, a ring allgather of the shards
//
// A flat ring across H hosts of L ranks sends 2(p-1)/p of the buffer per
// rank, and the L ranks of a host share its link: 2(p-1)/p * L of the
// buffer crosses each link. Here it is 2(H-1)/H, the least possible (the
// link bound), and the intra-host steps run over memory.
//
// Needs the same number of ranks on every host (Topology::uniform()); the
// cross-host step is recursive doubling for shards under
// kCrossHostRingFromBytes (fewer steps) and the ring above (least traffic).
// Results are bit-identical on every rank: each shard is reduced in one
// fixed order (its host's ring, then the cross-host algorithm's) and then
// copied. avg sums throughout and divides once, by p.
#pragma once

#include "coll/collective.hpp"

#include <chorus/types.hpp>

#include <cstddef>

namespace chorus::coll {

inline constexpr std::size_t kCrossHostRingFromBytes = 256 * 1024;

// c.topology must be set and uniform.
void hierarchical_allreduce(const Collective& c, const void* send, void* recv, std::size_t count,
                            DataType type, ReduceOp op);

}  // namespace chorus::coll
