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

#include "reduce/reduce.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace chorus::coll {
namespace {

// The tree's messages are cut into segments of this size, with up to
// kWindow of them posted ahead from each child.
constexpr std::size_t kSegmentBytes = 128 * 1024;
constexpr std::size_t kWindow = 4;

}  // namespace

void reduce_binomial(const Collective& c, const void* send, void* recv, std::size_t count,
                     DataType type, ReduceOp op, int root) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank(), vr = (r - root + p) % p;
  const std::size_t esize = size_of(type), bytes = count * esize;
  std::vector<int> children;  // nearest subtree first: the order of reduction
  int mask = 1;
  for (; mask < p && !(vr & mask); mask <<= 1)
    if (vr + mask < p) children.push_back((vr + mask + root) % p);
  const int parent = vr > 0 ? (vr - mask + root) % p : -1;

  std::size_t segment = std::max(kSegmentBytes, (bytes + kMaxSegments - 1) / kMaxSegments);
  segment = std::min((segment + esize - 1) / esize * esize, bytes);  // whole elements
  const std::size_t segments = bytes ? (bytes + segment - 1) / segment : 0;
  auto length_of = [&](std::size_t s) { return std::min(segment, bytes - s * segment); };
  auto tag_of = [&](std::size_t s) { return c.message_tag(0, 0, static_cast<unsigned>(s)); };

  // Each child's segments land in kWindow slots of scratch, refilled as
  // they are reduced. The result: recv at the root, scratch elsewhere; a
  // leaf has none and sends straight from its input.
  const std::size_t window = std::min(kWindow, segments);
  std::byte* slots = c.scratch_buffer(1, children.size() * window * segment);
  auto slot = [&](std::size_t child, std::size_t s) {
    return slots + (child * window + s % window) * segment;
  };
  std::vector<transport::RequestPtr> receives(children.size() * window), sends;
  auto post = [&](std::size_t child, std::size_t s) {
    receives[child * window + s % window] =
        t.irecv(children[child], tag_of(s), slot(child, s), length_of(s));
  };
  for (std::size_t s = 0; s < window; ++s)
    for (std::size_t child = 0; child < children.size(); ++child) post(child, s);
  std::byte* own = r == root             ? static_cast<std::byte*>(recv)
                   : children.empty()    ? nullptr
                                         : c.scratch_buffer(0, bytes);
  const auto* input = static_cast<const std::byte*>(send);

  // Segment by segment: so a parent reduces the first segments while the
  // later ones are still on the way, and forwards each as soon as it has it.
  for (std::size_t s = 0; s < segments; ++s) {
    const std::size_t first = s * segment, n = length_of(s) / esize;
    const std::byte* partial = input + first;
    for (std::size_t child = 0; child < children.size(); ++child) {
      c.wait(*receives[child * window + s % window]);
      reduce::reduce(own + first, partial, slot(child, s), n, type, op);  // partial op child
      partial = own + first;
      if (s + window < segments) post(child, s + window);
    }
    if (parent >= 0) sends.push_back(t.isend(parent, tag_of(s), partial, length_of(s)));
  }
  c.wait_all(sends);
  if (r != root || bytes == 0) return;
  if (children.empty() && own != input) std::memcpy(own, input, bytes);  // p == 1
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
