// Scatter (and scatterv) by the linear schedule: the root posts all p - 1
// sends at once, each from its block of send, and every other rank receives
// its block straight into recv. Each byte crosses the network once; the
// root's link carries (p - 1) blocks whatever the schedule.
//
//              +--block 1--> rank 1
//   root 0 ----+--block 2--> rank 2   (all p - 1 sends posted at once)
//              +--block 3--> rank 3
#include "coll/collectives.hpp"
#include "common/copy.hpp"

#include <cstring>
#include <vector>

namespace chorus::coll {

void scatterv(const Collective& c, const void* send, const BlockLayout& blocks, void* recv,
              std::size_t recv_count, DataType type, int root) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  const std::size_t esize = size_of(type);
  const transport::Tag tag = c.message_tag(0, 0, 0);  // one message per pair
  if (r != root) {
    wait_whole(c, *t.irecv(root, tag, recv, recv_count * esize), esize, "recv_count");
    return;
  }
  const auto* in = static_cast<const std::byte*>(send);
  std::vector<transport::RequestPtr> sends;
  for (int j = 0; j < p; ++j)
    if (j != root) sends.push_back(t.isend(j, tag, in + blocks.offset(j, esize), blocks.bytes(j, esize)));
  // The communicator has checked that the root sends itself what it expects.
  if (recv_count && in + blocks.offset(root, esize) != recv)
    copy_memory(recv, in + blocks.offset(root, esize), recv_count * esize);
  c.wait_all(sends);
}

}  // namespace chorus::coll
