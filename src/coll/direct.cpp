#include "coll/direct.hpp"

#include "coll/patterns/chunks.hpp"
#include "common/copy.hpp"
#include "reduce/reduce.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace chorus::coll {
namespace {

// Every rank sends send_bytes(q) bytes at send_at(q) to each peer q and
// receives recv_bytes(q) at recv_at(q) from it; returns when all is done.
template <class SendAt, class SendBytes, class RecvAt, class RecvBytes>
void all_to_all(const Collective& c, unsigned phase, SendAt send_at, SendBytes send_bytes,
                RecvAt recv_at, RecvBytes recv_bytes) {
  transport::Transport& t = c.transport;
  std::vector<transport::RequestPtr> requests;
  for (int q = 0; q < t.size(); ++q)
    if (q != t.rank())
      requests.push_back(t.irecv(q, c.message_tag(phase, 0, 0), recv_at(q), recv_bytes(q)));
  for (int q = 0; q < t.size(); ++q)
    if (q != t.rank())
      requests.push_back(t.isend(q, c.message_tag(phase, 0, 0), send_at(q), send_bytes(q)));
  c.wait_all(requests);
}

// dst = part(0) op part(1) op ... op part(p-1), in that order.
template <class Part>
void reduce_in_rank_order(void* dst, int p, Part part, std::size_t count, DataType type,
                          ReduceOp op) {
  if (count == 0) return;
  reduce::reduce(dst, part(0), part(1), count, type, op);
  for (int q = 2; q < p; ++q) reduce::reduce(dst, dst, part(q), count, type, op);
}

}  // namespace

void direct_one_shot_allreduce(const Collective& c, const void* send, void* recv, std::size_t count,
                               DataType type, ReduceOp op) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  const std::size_t bytes = count * size_of(type);
  if (p == 1) {
    if (send != recv) copy_memory(recv, send, bytes);
    return;
  }
  // Slot q holds rank q's contribution; ours too, since recv may be send.
  std::byte* slots = c.scratch_buffer(0, static_cast<std::size_t>(p) * bytes);
  auto slot = [&](int q) { return slots + static_cast<std::size_t>(q) * bytes; };
  copy_memory(slot(r), send, bytes);
  const auto whole = [&](int) { return bytes; };
  all_to_all(
      c, 0, [&](int) { return slot(r); }, whole, [&](int q) { return slot(q); }, whole);
  reduce_in_rank_order(recv, p, slot, count, type, op);
  if (op == ReduceOp::avg && count) reduce::divide(recv, count, type, static_cast<std::size_t>(p));
}

void direct_two_shot_allreduce(const Collective& c, const void* send, void* recv, std::size_t count,
                               DataType type, ReduceOp op) {
  transport::Transport& t = c.transport;
  const int p = t.size(), r = t.rank();
  const std::size_t esize = size_of(type);
  if (p == 1) {
    if (send != recv) copy_memory(recv, send, count * esize);
    return;
  }
  const auto up = static_cast<std::size_t>(p);
  const NearEqualChunks chunks{count, up};
  // Rank q reduces chunk q, or in place chunk (q + call) % p: then the chunk
  // a rank sums into is one it received itself in the call before, not the
  // one every peer has just read from it (ring_allreduce says why that is
  // slow).
  const std::size_t turn = send == recv ? c.sequence % up : 0;
  auto chunk_of = [&](int q) { return (static_cast<std::size_t>(q) + turn) % up; };
  auto chunk_count = [&](int q) { return chunks.size(chunk_of(q)); };
  auto chunk_offset = [&](int q) { return chunks.offset(chunk_of(q)) * esize; };
  const std::size_t mine = chunk_count(r);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);

  // Reduce-scatter: everyone's piece of this rank's chunk lands in slot q; ours is
  // copied in too, since recv may be send and is written below.
  std::byte* slots = c.scratch_buffer(0, up * mine * esize);
  auto slot = [&](int q) { return slots + static_cast<std::size_t>(q) * mine * esize; };
  copy_memory(slot(r), in + chunk_offset(r), mine * esize);
  const auto chunk_bytes = [&](int q) { return chunk_count(q) * esize; };
  const auto my_chunk_bytes = [&](int) { return mine * esize; };
  all_to_all(
      c, 0, [&](int q) { return in + chunk_offset(q); }, chunk_bytes,
      [&](int q) { return slot(q); }, my_chunk_bytes);
  reduce_in_rank_order(out + chunk_offset(r), p, slot, mine, type, op);
  if (op == ReduceOp::avg && mine)
    reduce::divide(out + chunk_offset(r), mine, type, static_cast<std::size_t>(p));

  // Allgather: our finished chunk to everyone, theirs into place.
  all_to_all(
      c, 1, [&](int) { return out + chunk_offset(r); }, my_chunk_bytes,
      [&](int q) { return out + chunk_offset(q); }, chunk_bytes);
}

double direct_one_shot_cost(const CostModel& m, double n, int ranks) {
  const double p = ranks;
  return m.alpha + (p - 2) * m.overhead + (p - 1) * n * (m.beta + m.gamma);
}

double direct_two_shot_cost(const CostModel& m, double n, int ranks) {
  const double p = ranks, share = (p - 1) / p;
  return 2 * (m.alpha + (p - 2) * m.overhead) + 2 * share * n * m.beta + share * n * m.gamma;
}

}  // namespace chorus::coll
