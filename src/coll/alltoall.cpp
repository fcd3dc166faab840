// Alltoall by pairwise exchange: in step s rank r sends to r + s and
// receives from r - s, so every pair meets once and no rank is a hot spot.
// All steps are posted at once (each message lands straight in its block);
// the transport keeps memory bounded for those that arrive early. The
// v-form is the same schedule with each pair's own sizes; a message shorter
// than its receive is a mismatch, named.
#include "coll/collectives.hpp"

#include <cstring>
#include <vector>

namespace chorus::coll {

void alltoallv(const Collective& c, const void* send, const BlockLayout& send_blocks, void* recv,
               const BlockLayout& recv_blocks, DataType type) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  require_steps(p, "alltoall");
  const std::size_t esize = size_of(type);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  // The communicator has checked that this rank sends itself what it expects.
  if (const std::size_t own = send_blocks.bytes(r, esize)) std::memcpy(out + recv_blocks.offset(r, esize), in + send_blocks.offset(r, esize), own);
  if (p == 1) return;
  std::vector<transport::RequestPtr> receives, sends;
  for (int s = 1; s < p; ++s) {
    const transport::Tag tag = c.message_tag(0, static_cast<unsigned>(s), 0);
    const int to = (r + s) % p, from = (r - s + p) % p;
    receives.push_back(t.irecv(from, tag, out + recv_blocks.offset(from, esize),
                               recv_blocks.bytes(from, esize)));
    sends.push_back(t.isend(to, tag, in + send_blocks.offset(to, esize), send_blocks.bytes(to, esize)));
  }
  for (const auto& receive : receives) wait_whole(c, *receive, esize, "recv_counts");
  c.wait_all(sends);
}

void alltoall(const Collective& c, const void* send, void* recv, std::size_t count,
              DataType type) {
  const BlockLayout blocks = BlockLayout::uniform(c.transport.size(), count);
  if (count > 0) alltoallv(c, send, blocks, recv, blocks, type);
}

}  // namespace chorus::coll
