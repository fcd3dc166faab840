// Collectives straight through the host segment (shm/segment.hpp), for
// communicators whose ranks all share one host, and the call check of every
// call on such a communicator.
//
// A shared-memory collective is one exchange: each rank copies what it
// contributes into its own slot and publishes it (one release store), then
// reads the slots it needs, in place, once they hold this call. No messages,
// no requests, no allocation; the slot's header carries the call's
// signature, so the call check costs nothing more (every rank compares
// every rank's signature as it reads). AllReduce reduces all slots in rank
// order on every rank: bit-identical results everywhere.
//
//   rank 0 slot  [sig|data]      each rank writes its own slot,
//   rank 1 slot  [sig|data]  --> then every rank reads the slots it needs
//   rank 2 slot  [sig|data]      (all, the root's, ...) in rank order
//
// They run while what a rank writes fits its slot (CHORUS_SHM_BYTES); the
// registry chooses them first when it does (coll/registry.cpp).
#pragma once

#include "coll/call_check.hpp"
#include "coll/collective.hpp"

#include <cstddef>
#include <cstdint>

namespace chorus::coll {

struct Operands;

// The call check through the segment, for calls whose algorithm sends
// messages: the signature goes into this rank's slot header at once, and
// poll() reads the peers' as they arrive. Every rank sees all signatures,
// so every rank names the same two calls (the smallest and largest
// signature, as MessageCallCheck does).
class HostCallCheck final : public CallCheck {
 public:
  HostCallCheck(const Collective& collective, const CallSignature& mine,
                std::string_view (*name_algorithm)(std::uint8_t));
  void poll() override;
  void finish(transport::Deadline deadline) override;
  bool finished() const noexcept override { return seen_ == collective_.transport.size(); }

 private:
  const Collective& collective_;
  std::string_view (*name_algorithm_)(std::uint8_t);
  int seen_ = 0;  // ranks whose signature was read, in rank order
  const CallSignature mine_;
  SignatureExtremes extremes_;
};

// With the call check off, a call whose algorithm sends messages still
// marks its slot with its sequence number (what tells peers that this rank
// is done with the calls before it; shm/segment.hpp).
void announce_call(const Collective& c);

// `c` with c.own_host as its host segment (what announce_call and the
// helpers of this file then use): across hosts, the segment of this rank's
// host, whose ranks are the host's by local rank.
Collective on_own_host(const Collective& c);

// The shared-memory algorithms (registry rows of family "shm"); c.host must
// be set, and what each rank writes must fit a slot (host_slot_need()).
//
// AllReduce has two. One-shot: every rank reduces every other slot, whole,
// with its own input (one step; p reads of the buffer per rank). Two-shot:
// rank r reduces only chunk r of every slot (its own from its input) into
// a place of its own slot, marks it, and every rank copies the p reduced
// chunks out (two steps; about two reads of the buffer per rank, whatever
// p): the one for larger buffers, in rounds of pieces of every chunk
// through a window of the slot, so at any size.
//
//   one-shot   r: out = s0 + s1 + s2 + s3            (all of it; s_r: its input)
//   two-shot   r: c_r = s0[r] + s1[r] + s2[r] + s3[r] (its chunk), then
//                 out = c_0 | c_1 | c_2 | c_3         (copied from the slots)
void shm_one_shot_allreduce(const Collective& c, const Operands& o);
void shm_two_shot_allreduce(const Collective& c, const Operands& o);
// What two-shot needs of a slot for a buffer of `bytes`: two rounds'
// pieces (the whole chunk for a small buffer); any size below 2 GiB.
std::size_t shm_two_shot_need(std::size_t bytes, int p);
// Broadcast and reduce stream beyond 64 KiB: the writers (the root; a
// reduce's others) publish their slot, then their data chunk by chunk,
// which the readers copy out or reduce as it lands; data beyond a slot
// goes through it as through a ring buffer (the readers say how far they
// consumed). So a slot of 64 KiB serves any size below 2 GiB.
void shm_broadcast(const Collective& c, const Operands& o);
void shm_reduce(const Collective& c, const Operands& o);
// What broadcast and reduce need of a slot for a call of `bytes`.
std::size_t shm_streamed_need(std::size_t bytes, int p);
void shm_allgather(const Collective& c, const Operands& o);
void shm_reduce_scatter(const Collective& c, const Operands& o);
void shm_reduce_scatter_v(const Collective& c, const Operands& o);
void shm_alltoall(const Collective& c, const Operands& o);
// What alltoall needs of a slot for blocks of `block` bytes: all p blocks
// while they are small, else one round of its stream.
std::size_t shm_alltoall_need(std::size_t block, int p);
void shm_gather(const Collective& c, const Operands& o);
void shm_scatter(const Collective& c, const Operands& o);
// The v-forms whose block sizes only a block's writer and reader know run
// at every size: a block of at most 64 KiB (less where the slot is small)
// goes through its writer's slot, a larger one as a message. Scatterv's
// root and every alltoallv rank put a table of their p block sizes first
// (shm_block_table_need(): what they need of a slot at least).
// Allgatherv, whose block sizes every rank knows, goes all through the
// segment: every block through its rank's slot while the largest is at
// most 64 KiB, else all streamed in rounds of 64 KiB of every block.
void shm_allgatherv(const Collective& c, const Operands& o);
std::size_t shm_allgatherv_need(std::size_t bytes, int p);
void shm_gatherv(const Collective& c, const Operands& o);
void shm_scatterv(const Collective& c, const Operands& o);
void shm_alltoallv(const Collective& c, const Operands& o);
std::size_t shm_block_table_need(std::size_t bytes, int p);
void shm_barrier(const Collective& c, const Operands& o);

// AllReduce across hosts for small buffers, through each host's own
// segment (c.own_host) and messages between hosts' leaders (local rank 0
// of each): every rank writes its buffer into its slot; the leader reduces
// its host's slots in local-rank order; the leaders combine their hosts'
// partials by recursive doubling (a host beyond the largest power of two
// hands its partial to the host that many below and gets the result back),
// each message carrying the smallest and largest signature seen so far;
// each leader writes the result into its slot and its host's ranks copy it.
// ceil(log2 hosts) latencies across the links where a flat algorithm takes
// log2 p steps and the call check its own rounds; the same bits on every
// rank (partials combine lower host first); and the call check carried in
// the same exchange: every rank compares its leader's signature, every
// leader its host's and, through the messages, every other host's. (A
// mismatch in which whole hosts agree among themselves and some hosts run
// another algorithm is found at the deadline: their leaders wait for
// messages that do not come.)
//
//   host 0: r0 r1 --slots--> leader 0 <--partials--> leader 1 <--slots-- r2 r3 :host 1
//           r0 r1 <--result-- leader 0               leader 1 --result--> r2 r3
void shm_hierarchical_allreduce(const Collective& c, const Operands& o);
// What it writes into a leader's slot for a buffer of `bytes` (its result
// after the input's place): a leader's message is at most a slot's size.
std::size_t shm_hierarchical_need(std::size_t bytes, int p);

}  // namespace chorus::coll
