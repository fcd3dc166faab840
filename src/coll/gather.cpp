// Gather (and gatherv) by the linear schedule: every rank sends its block
// straight to the root, which has posted all p - 1 receives at once, each
// into its place in recv. One message per rank and no forwarding, so each
// byte crosses the network once; the root's link is the bottleneck, as it
// must be whatever the schedule (it receives (p - 1) blocks).
//
//   rank 1 --block 1--+
//   rank 2 --block 2--+--> root 0 (all p - 1 receives posted at once)
//   rank 3 --block 3--+
#include "coll/collectives.hpp"
#include "common/copy.hpp"

#include <cstring>
#include <vector>

namespace chorus::coll {

void gatherv(const Collective& c, const void* send, std::size_t send_count, void* recv,
             const BlockLayout& blocks, DataType type, int root, unsigned phase) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  const std::size_t esize = size_of(type);
  const transport::Tag tag = c.message_tag(phase, 0, 0);  // one message per pair
  if (r != root) {
    c.wait(*t.isend(root, tag, send, send_count * esize));
    return;
  }
  auto* out = static_cast<std::byte*>(recv);
  std::vector<transport::RequestPtr> receives;
  for (int j = 0; j < p; ++j)
    if (j != root) receives.push_back(t.irecv(j, tag, out + blocks.offset(j, esize), blocks.bytes(j, esize)));
  // The communicator has checked that the root sends itself what it expects.
  if (send_count && out + blocks.offset(root, esize) != send)
    copy_memory(out + blocks.offset(root, esize), send, send_count * esize);
  c.wait_all(receives);  // any peer's failure ends the call at once
  for (const auto& receive : receives) expect_whole(c, *receive, esize, "recv_counts");
}

}  // namespace chorus::coll
