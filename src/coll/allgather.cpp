// Allgather. Ring (any sizes, and the v-form): in step s every rank passes
// on the block it received in step s - 1 (its own first), so after p - 1
// steps every rank has every block; each rank sends and receives (p - 1)
// blocks, the least possible, and blocks land straight in recv. It is the
// ring's allgather phase (coll/patterns/ring.hpp), segmented and pipelined.
// Bruck (small equal blocks, p > 2): in step k every rank sends the
// min(2^k, p - 2^k) blocks it has gathered so far to rank - 2^k and receives
// as many from rank + 2^k, so ceil(log2 p) steps instead of p - 1; blocks
// collect in scratch in rotated order and are put in place at the end.
//
//   Bruck, p = 5 (rank r holds [r] first):
//     step 0: r sends its 1 block to r - 1     -> holds [r, r+1]
//     step 1: r sends its 2 blocks to r - 2    -> holds [r .. r+3]
//     step 2: r sends 1 block (5 - 4) to r - 4 -> holds all 5, rotated by r
#include "coll/collectives.hpp"

#include "coll/patterns/ring.hpp"
#include "common/copy.hpp"

#include <algorithm>
#include <cstring>

namespace chorus::coll {

void allgather_bruck(const Collective& c, const void* send, void* recv, std::size_t count,
                     DataType type) {
  const std::size_t block = count * size_of(type);
  if (block == 0) return;
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  std::byte* gathered = c.scratch_buffer(0, block * static_cast<std::size_t>(p));
  copy_memory(gathered, send, block);
  unsigned step = 0;
  for (int distance = 1; distance < p; distance *= 2, ++step) {
    const auto blocks = static_cast<std::size_t>(std::min(distance, p - distance));
    const transport::Tag tag = c.message_tag(0, step, 0);
    auto in = t.irecv((r + distance) % p, tag, gathered + static_cast<std::size_t>(distance) * block,
                      blocks * block);
    auto out = t.isend((r - distance + p) % p, tag, gathered, blocks * block);
    c.wait(*in);
    c.wait(*out);
  }
  // gathered[i] is rank (r + i)'s block.
  auto* out = static_cast<std::byte*>(recv);
  for (int i = 0; i < p; ++i)
    copy_memory(out + static_cast<std::size_t>((r + i) % p) * block,
                gathered + static_cast<std::size_t>(i) * block, block);
}

void allgatherv(const Collective& c, const void* send, void* recv, const BlockLayout& blocks,
                DataType type, unsigned phase) {
  const bool all_empty = std::all_of(blocks.counts.begin(), blocks.counts.end(),
                                     [](std::size_t n) { return n == 0; });
  // The ring copies this rank's block from `send` into place itself, while
  // its first messages are in flight.
  if (!all_empty)
    ring_allgather(c, blocks, size_of(type), static_cast<std::byte*>(recv), 0, phase,
                   static_cast<const std::byte*>(send));
}

}  // namespace chorus::coll
