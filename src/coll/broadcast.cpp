// Broadcast. Small buffers: a binomial tree rooted at `root`, ceil(log2 p)
// steps of the whole buffer. Large ones: a chain along the ring from the
// root, cut into segments that each rank forwards as soon as it has them,
// so that every link carries the buffer once and the time is about
// (p - 2 + segments) segment transfers instead of log2(p) whole buffers.
// Which runs is the registry's choice (coll/registry.cpp).
//
//   binomial tree, root 0, p = 8:        chain, root 0, p = 4, segments s0 s1 s2:
//     step 0: 0 -> 4                       0 -s0-> 1 -s0-> 2 -s0-> 3
//     step 1: 0 -> 2, 4 -> 6               0 -s1-> 1 -s1-> 2 ...     (each link busy
//     step 2: 0->1, 2->3, 4->5, 6->7       0 -s2-> 1 ...              with the next one)
#include "coll/collectives.hpp"

#include <algorithm>
#include <vector>

namespace chorus::coll {
namespace {
constexpr std::size_t kSegmentBytes = 512 * 1024;
}  // namespace

void broadcast_binomial(const Collective& c, void* data, std::size_t count, DataType type,
                        int root) {
  const std::size_t bytes = count * size_of(type);
  transport::Transport& t = c.transport;
  if (t.size() == 1 || bytes == 0) return;
  auto* buffer = static_cast<std::byte*>(data);
  const int p = t.size(), vr = (t.rank() - root + p) % p;
  const transport::Tag tag = c.message_tag(0, 0, 0);  // one message per pair
  int mask = 1;
  for (; mask < p; mask <<= 1) {
    if (vr & mask) {
      c.wait(*t.irecv((vr - mask + root) % p, tag, buffer, bytes));
      break;
    }
  }
  std::vector<transport::RequestPtr> sends;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < p) sends.push_back(t.isend((vr + mask + root) % p, tag, buffer, bytes));
  c.wait_all(sends);
}

void broadcast_chain(const Collective& c, void* data, std::size_t count, DataType type,
                     int root) {
  const std::size_t esize = size_of(type), bytes = count * esize;
  transport::Transport& t = c.transport;
  if (t.size() == 1 || bytes == 0) return;
  auto* buffer = static_cast<std::byte*>(data);
  const int p = t.size(), r = t.rank(), vr = (r - root + p) % p;
  std::size_t segment = std::max(kSegmentBytes, (bytes + kMaxSegments - 1) / kMaxSegments);
  segment = (segment + esize - 1) / esize * esize;  // whole elements
  const std::size_t segments = (bytes + segment - 1) / segment;
  const int prev = (r - 1 + p) % p, next = (r + 1) % p;
  std::vector<transport::RequestPtr> receives, sends;
  for (std::size_t s = 0; vr > 0 && s < segments; ++s) {
    const std::size_t first = s * segment, length = std::min(segment, bytes - first);
    receives.push_back(t.irecv(prev, c.message_tag(0, 0, static_cast<unsigned>(s)),
                               buffer + first, length));
  }
  for (std::size_t s = 0; s < segments; ++s) {
    const std::size_t first = s * segment, length = std::min(segment, bytes - first);
    if (vr > 0) c.wait(*receives[s]);
    if (vr < p - 1)
      sends.push_back(t.isend(next, c.message_tag(0, 0, static_cast<unsigned>(s)),
                              buffer + first, length));
  }
  c.wait_all(sends);
}

}  // namespace chorus::coll
