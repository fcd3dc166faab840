// Reduce to one rank. Small buffers (and any at p = 2): a binomial tree
// towards the root, each rank adding its children's partial results in a
// fixed order (nearest subtree first), so the result does not depend on
// timing; ceil(log2 p) steps of the whole buffer, cut into segments so that
// a rank reduces and forwards the first while the later ones arrive, each
// while its copy is still in cache. Large ones (p > 2): a ring
// reduce-scatter leaves block j reduced at rank j, and a gather brings the
// blocks to the root, so every rank sends about 2 (p - 1) / p of the buffer
// and the reduction work is shared, instead of the tree's log2(p) whole
// buffers.
//
//   binomial tree to root 0, p = 8        reduce-scatter + gather, p = 4:
//     step 0: 1->0, 3->2, 5->4, 7->6        ring reduce-scatter (patterns/ring.hpp):
//     step 1: 2->0, 6->4                    rank j holds block j reduced; then
//     step 2: 4->0                          1, 2, 3 -> root (linear gather)
#include "coll/collectives.hpp"

#include "coll/patterns/tree_reduce.hpp"
#include "common/copy.hpp"
#include "reduce/reduce.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace chorus::coll {

void reduce_binomial(const Collective& c, const void* send, void* recv, std::size_t count,
                     DataType type, ReduceOp op, int root) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank(), vr = (r - root + p) % p;
  const std::size_t esize = size_of(type), bytes = count * esize;
  TreeReduce::Shape shape;  // nearest subtree first: the order of reduction
  int mask = 1;
  for (; mask < p && !(vr & mask); mask <<= 1)
    if (vr + mask < p) shape.children.push_back((vr + mask + root) % p);
  shape.parent = vr > 0 ? (vr - mask + root) % p : -1;
  // The partial result: recv at the root, scratch elsewhere; a leaf has none
  // and sends straight from its input.
  const auto* input = static_cast<const std::byte*>(send);
  std::byte* own = r == root                ? static_cast<std::byte*>(recv)
                   : shape.children.empty() ? nullptr
                                            : c.scratch_buffer(0, bytes);
  const bool lone = shape.children.empty();
  TreeReduce tree(c, std::move(shape), input, own, count, type, op,
                  [&](std::size_t s) { return c.message_tag(0, 0, static_cast<unsigned>(s)); }, 1);
  while (!tree.done()) {
    transport::RequestPtr blocker;
    try {  // a failed request is thrown by advance(): end the call properly
      if (tree.advance()) continue;
      blocker = tree.blocker();
    } catch (const Error& e) {
      c.fail(e);
    }
    if (blocker) c.wait(*blocker, [&] { tree.advance(); });
  }
  if (r != root || bytes == 0) return;
  if (lone && own != input) copy_memory(own, input, bytes);  // p == 1
  if (op == ReduceOp::avg) reduce::divide(own, count, type, static_cast<std::size_t>(p));
}

void reduce_scatter_gather(const Collective& c, const void* send, void* recv, std::size_t count,
                           DataType type, ReduceOp op, int root) {
  const int p = c.transport.size(), r = c.transport.rank();
  const BlockLayout blocks = BlockLayout::near_equal(count, p);
  const std::vector<std::size_t>& counts = blocks.counts;
  const std::size_t esize = size_of(type), mine = counts[static_cast<std::size_t>(r)];
  // The root's block is reduced straight into its place in recv; the others
  // in scratch (slot 3: the reduce-scatter uses 0..2).
  std::byte* block = r == root ? static_cast<std::byte*>(recv) + blocks.offset(r, esize)
                               : c.scratch_buffer(3, mine * esize);
  reduce_scatter_ring(c, send, block, counts, type, op, 0);
  gatherv(c, block, mine, recv, blocks, type, root, 1);
}

}  // namespace chorus::coll
