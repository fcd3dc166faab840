// Alltoall. Pairwise exchange: in step s rank r sends to r + s and
// receives from r - s, so every pair meets once and no rank is a hot spot.
// All steps are posted at once (each message lands straight in its block);
// the transport keeps memory bounded for those that arrive early. The
// v-form is the same schedule with each pair's own sizes; a message shorter
// than its receive is a mismatch, named.
// Bruck (small equal blocks, many ranks): ceil(log2 p) steps instead of
// p - 1 messages. Blocks are rotated so that index i holds the block bound
// for rank + i; in step k every block whose index has bit k set moves k
// ranks on, keeping its index, so after all steps index i holds the block
// from rank - i. Each step packs about half the blocks, so the bytes moved
// grow by log2(p) / 2: it pays only while per-message costs dominate.
//
//   pairwise, p = 4 (all posted at once)    Bruck, p = 4 (indices 0..3 after rotation)
//     s = 1: r -> r+1, r <- r-1               step 0 (bit 0): indices 1, 3 move 1 rank on
//     s = 2: r -> r+2, r <- r-2               step 1 (bit 1): indices 2, 3 move 2 ranks on
//     s = 3: r -> r+3, r <- r-3
#include "coll/collectives.hpp"
#include "common/copy.hpp"

#include <cstring>
#include <vector>

namespace chorus::coll {

void alltoall_bruck(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type) {
  const std::size_t block = count * size_of(type);
  if (block == 0) return;
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  const auto ranks = static_cast<std::size_t>(p);
  auto at = [block](std::byte* base, std::size_t i) { return base + i * block; };
  std::byte* blocks = c.scratch_buffer(0, block * ranks);
  std::byte* outgoing = c.scratch_buffer(1, block * (ranks / 2 + 1));
  std::byte* incoming = c.scratch_buffer(2, block * (ranks / 2 + 1));
  const auto* in = static_cast<const std::byte*>(send);
  for (std::size_t i = 0; i < ranks; ++i)
    copy_memory(at(blocks, i), in + (static_cast<std::size_t>(r) + i) % ranks * block, block);
  unsigned step = 0;
  for (std::size_t k = 1; k < ranks; k <<= 1, ++step) {
    std::size_t moving = 0;
    for (std::size_t i = k; i < ranks; ++i)
      if (i & k) copy_memory(at(outgoing, moving++), at(blocks, i), block);
    const transport::Tag tag = c.message_tag(0, step, 0);
    const int distance = static_cast<int>(k);
    auto got = t.irecv((r - distance + p) % p, tag, incoming, moving * block);
    auto sent = t.isend((r + distance) % p, tag, outgoing, moving * block);
    c.wait(*got);
    c.wait(*sent);
    moving = 0;
    for (std::size_t i = k; i < ranks; ++i)
      if (i & k) copy_memory(at(blocks, i), at(incoming, moving++), block);
  }
  auto* out = static_cast<std::byte*>(recv);
  for (std::size_t i = 0; i < ranks; ++i)
    copy_memory(out + (static_cast<std::size_t>(r) + ranks - i) % ranks * block, at(blocks, i), block);
}

void alltoallv(const Collective& c, const void* send, const BlockLayout& send_blocks, void* recv,
               const BlockLayout& recv_blocks, DataType type) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  require_steps(p, "alltoall");
  const std::size_t esize = size_of(type);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  // The communicator has checked that this rank sends itself what it expects.
  if (const std::size_t own = send_blocks.bytes(r, esize))
    copy_memory(out + recv_blocks.offset(r, esize), in + send_blocks.offset(r, esize), own);
  if (p == 1) return;
  // All requests are waited on together, so that any peer's failure ends
  // the call at once; the receives are then checked for whole messages.
  std::vector<transport::RequestPtr> receives, all;
  for (int s = 1; s < p; ++s) {
    const transport::Tag tag = c.message_tag(0, static_cast<unsigned>(s), 0);
    const int to = (r + s) % p, from = (r - s + p) % p;
    receives.push_back(t.irecv(from, tag, out + recv_blocks.offset(from, esize),
                               recv_blocks.bytes(from, esize)));
    all.push_back(receives.back());
    all.push_back(t.isend(to, tag, in + send_blocks.offset(to, esize), send_blocks.bytes(to, esize)));
  }
  c.wait_all(all);
  for (const auto& receive : receives) expect_whole(c, *receive, esize, "recv_counts");
}

void alltoall_pairwise(const Collective& c, const void* send, void* recv, std::size_t count,
                       DataType type) {
  if (count == 0) return;
  const BlockLayout blocks = BlockLayout::uniform(c.transport.size(), count);
  alltoallv(c, send, blocks, recv, blocks, type);
}

}  // namespace chorus::coll
