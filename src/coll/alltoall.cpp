// Alltoall by pairwise exchange: in step s rank r sends to r + s and
// receives from r - s, so every pair meets once and no rank is a hot spot.
// All steps are posted at once (each message lands straight in its block);
// the transport keeps memory bounded for those that arrive early.
#include "coll/collectives.hpp"

#include <cstring>
#include <vector>

namespace chorus::coll {

void alltoall(const Collective& c, const void* send, void* recv, std::size_t count,
              DataType type) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  require_steps(p, "alltoall");
  const std::size_t block = count * size_of(type);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  auto offset = [&](int j) { return static_cast<std::size_t>(j) * block; };
  if (block) std::memcpy(out + offset(r), in + offset(r), block);
  if (p == 1 || block == 0) return;
  std::vector<transport::RequestPtr> requests;
  for (int s = 1; s < p; ++s) {
    const transport::Tag tag = c.message_tag(0, static_cast<unsigned>(s), 0);
    const int to = (r + s) % p, from = (r - s + p) % p;
    requests.push_back(t.irecv(from, tag, out + offset(from), block));
    requests.push_back(t.isend(to, tag, in + offset(to), block));
  }
  c.wait_all(requests);
}

}  // namespace chorus::coll
