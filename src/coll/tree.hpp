// Double binary tree AllReduce: the buffer is cut in two halves, each reduced
// up one binary tree to its root and broadcast back down, in segments, so
// that a segment moves up (or down) one level while the next is reduced.
// The two trees are complementary (a rank that is a leaf in one is interior
// in the other, as in NCCL), so every rank sends and receives in both
// directions at once instead of leaving the leaves' links idle.
//
// Tree 0 is the in-order binary tree over positions 1..p (position = rank+1;
// the node at position i with lowest set bit b has children i-b/2 and
// i+b/2); tree 1 is the same tree over ranks mirrored (p even) or shifted by
// one (p odd). 2 log2(p) latency steps per segment, about 2n bytes per rank;
// for mid sizes on many ranks.
//
//   p = 8, tree 0 over positions 1..8 (position = rank + 1):
//
//                  8          the root: the highest power of two <= p
//                 /
//                4            tree 1 is the same shape over the ranks
//              /   \          mirrored, so the leaves of tree 0 (1 3 5 7)
//            2       6        are inner nodes there, and every link
//           / \     / \       carries half of the buffer each way
//          1   3   5   7
//
// Each segment is reduced by its tree's root and sent down unchanged, so all
// ranks end bit-identical; avg divides at the root. Same contract as ring.hpp.
#pragma once

#include "coll/collective.hpp"
#include "coll/cost_model.hpp"

#include <chorus/types.hpp>

#include <cstddef>
#include <vector>

namespace chorus::coll {

void tree_allreduce(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type, ReduceOp op);
double tree_cost(const CostModel& m, double bytes, int ranks);

// Rank `rank`'s place in tree `which` (0 or 1) over p ranks; for tests.
struct TreeLinks {
  int parent = -1;            // -1 at the root
  std::vector<int> children;  // 0, 1 or 2 ranks
};
TreeLinks tree_links(int which, int rank, int p);

}  // namespace chorus::coll
