// Reduce to one rank. Small buffers: a binomial tree towards the root, each
// rank adding its children's partial results in a fixed order (nearest
// subtree first), so the result does not depend on timing; ceil(log2 p)
// steps of the whole buffer. Large ones (p > 2): a ring reduce-scatter
// leaves block j reduced at rank j, and a gather brings the blocks to the
// root, so every rank sends about 2 (p - 1) / p of the buffer and the
// reduction work is shared, instead of the tree's log2(p) whole buffers.
#include "coll/collectives.hpp"

#include "reduce/reduce.hpp"

#include <cstring>
#include <vector>

namespace chorus::coll {
namespace {

// From here the shared reduction and (p - 1) / p traffic beat the tree's
// fewer steps (measured at p = 4, docs/tuning.md).
constexpr std::size_t kReduceScatterGatherFromBytes = 1024 * 1024;

void binomial(const Collective& c, const void* send, void* recv, std::size_t count,
              DataType type, ReduceOp op, int root) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank(), vr = (r - root + p) % p;
  const std::size_t bytes = count * size_of(type);
  // The partial result so far: the send buffer itself until a child's part
  // arrives (so a leaf sends straight from it, and nobody copies its input
  // first), then its own buffer: recv at the root, scratch elsewhere.
  std::byte* own = r == root ? static_cast<std::byte*>(recv) : nullptr;
  const std::byte* partial = static_cast<const std::byte*>(send);
  const transport::Tag tag = c.message_tag(0, 0, 0);  // one message per pair
  for (int mask = 1; mask < p && bytes; mask <<= 1) {
    if (vr & mask) {
      c.wait(*t.isend((vr - mask + root) % p, tag, partial, bytes));
      return;
    }
    if (vr + mask < p) {
      std::byte* incoming = c.scratch_buffer(1, bytes);
      c.wait(*t.irecv((vr + mask + root) % p, tag, incoming, bytes));
      if (!own) own = c.scratch_buffer(0, bytes);
      reduce::reduce(own, partial, incoming, count, type, op);  // partial op child: a fixed order
      partial = own;
    }
  }
  if (r != root) return;  // p == 1 or nothing to send
  if (bytes && partial != own) std::memcpy(own, partial, bytes);
  if (op == ReduceOp::avg && bytes) reduce::divide(own, count, type, static_cast<std::size_t>(p));
}

void reduce_scatter_gather(const Collective& c, const void* send, void* recv, std::size_t count,
                           DataType type, ReduceOp op, int root) {
  const int p = c.transport.size(), r = c.transport.rank();
  const auto ranks = static_cast<std::size_t>(p);
  std::vector<std::size_t> counts(ranks, count / ranks);
  for (std::size_t j = 0; j < count % ranks; ++j) ++counts[j];
  const BlockLayout blocks = BlockLayout::packed(counts);
  const std::size_t esize = size_of(type), mine = counts[static_cast<std::size_t>(r)];
  // The root's block is reduced straight into its place in recv; the others
  // in scratch (slot 3: the reduce-scatter uses 0..2).
  std::byte* block = r == root ? static_cast<std::byte*>(recv) + blocks.offset(r, esize)
                               : c.scratch_buffer(3, mine * esize);
  reduce_scatter_v(c, send, block, counts, type, op, 0);
  gatherv(c, block, mine, recv, blocks, type, root, 1);
}

}  // namespace

Method reduce_method(std::size_t bytes, int p) noexcept {
  return p > 2 && bytes >= kReduceScatterGatherFromBytes ? Method::reduce_scatter_gather
                                                         : Method::binomial_tree;
}

void reduce_to_root(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type, ReduceOp op, int root) {
  if (reduce_method(count * size_of(type), c.transport.size()) == Method::reduce_scatter_gather)
    reduce_scatter_gather(c, send, recv, count, type, op, root);
  else
    binomial(c, send, recv, count, type, op, root);
}

}  // namespace chorus::coll
