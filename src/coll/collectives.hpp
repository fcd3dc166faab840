// The algorithms of the collectives other than AllReduce, a file per
// collective, all over the same Collective (transport, tag space, deadline,
// call check) as the AllReduce algorithms; coll/registry.hpp names them and
// chooses among them. Buffers are as the public API documents them
// (include/chorus/communicator.hpp); the Communicator has checked the
// arguments. Every function is correct for p >= 1 and zero counts.
//
// `phase` (0 or 1) picks the half of the call's tag space a function uses,
// so that one call can run two of them back to back (reduce: a
// reduce-scatter, then a gather).
#pragma once

#include "coll/collective.hpp"

#include <chorus/types.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::coll {

// Throws Error(unsupported) when p ranks need more ring steps than a call's
// tags can number (kMaxSteps).
void require_steps(int p, std::string_view collective);

// Where each rank's block lies in a buffer: counts[j] elements starting
// displs[j] elements from the buffer's start; one entry per rank.
struct BlockLayout {
  std::vector<std::size_t> counts, displs;
  // p blocks of `count`, back to back.
  static BlockLayout uniform(int p, std::size_t count);
  // Blocks of `counts`, back to back in rank order.
  static BlockLayout packed(std::span<const std::size_t> counts);
  // `count` elements in p near-equal blocks, back to back (patterns/chunks.hpp).
  static BlockLayout near_equal(std::size_t count, int p);
  std::size_t offset(int j, std::size_t esize) const { return displs[static_cast<std::size_t>(j)] * esize; }
  std::size_t bytes(int j, std::size_t esize) const { return counts[static_cast<std::size_t>(j)] * esize; }
};

// Waits for a receive whose size the receiver knows (v-forms, where ranks
// may disagree about a count): a shorter message than expected ends the call
// with mismatched_collective, naming both counts. `what` names the buffer.
void wait_whole(const Collective& c, const transport::Request& receive, std::size_t esize,
                std::string_view what);
// The same check on a receive that has completed.
void expect_whole(const Collective& c, const transport::Request& receive, std::size_t esize,
                  std::string_view what);

// broadcast.cpp: root's `count` elements to every rank's `buffer`.
// Binomial tree: ceil(log2 p) steps of the whole buffer. Chain: segments
// passed along the ring from the root, each forwarded as soon as it lands.
void broadcast_binomial(const Collective& c, void* buffer, std::size_t count, DataType type,
                        int root);
void broadcast_chain(const Collective& c, void* buffer, std::size_t count, DataType type,
                     int root);

// reduce_to_root.cpp: recv (at root only) = op over all ranks of send.
// send == recv at root is in place. Binomial tree (segmented), or a ring
// reduce-scatter followed by a gather of the blocks at the root.
void reduce_binomial(const Collective& c, const void* send, void* recv, std::size_t count,
                     DataType type, ReduceOp op, int root);
void reduce_scatter_gather(const Collective& c, const void* send, void* recv, std::size_t count,
                           DataType type, ReduceOp op, int root);

// allgather.cpp: recv (p blocks of count) gets rank j's send in block j.
// In place when send == recv + rank * block. Bruck: ceil(log2 p) steps.
void allgather_bruck(const Collective& c, const void* send, void* recv, std::size_t count,
                     DataType type);
// The ring, for any layout: recv's block j (as `blocks` lays it out) gets
// rank j's send; in place when send is this rank's block of recv.
void allgatherv(const Collective& c, const void* send, void* recv, const BlockLayout& blocks,
                DataType type, unsigned phase = 0);

// reduce_scatter.cpp: send holds p blocks, counts[j] elements each, back to
// back; recv (counts[rank]) gets block `rank` reduced over all ranks. In
// place when recv is this rank's block of send. Ring (any p), or recursive
// halving (p a power of two: throws Error(unsupported) otherwise).
void reduce_scatter_ring(const Collective& c, const void* send, void* recv,
                         std::span<const std::size_t> counts, DataType type, ReduceOp op,
                         unsigned phase = 0);
void reduce_scatter_halving(const Collective& c, const void* send, void* recv,
                            std::span<const std::size_t> counts, DataType type, ReduceOp op,
                            unsigned phase = 0);

// alltoall.cpp: send's block j goes to rank j, into its recv's block
// `rank`. Pairwise exchange for any layout: send_blocks.counts[j] on this
// rank must equal recv_blocks.counts[rank] on rank j. Bruck: equal blocks
// in ceil(log2 p) steps.
void alltoallv(const Collective& c, const void* send, const BlockLayout& send_blocks, void* recv,
               const BlockLayout& recv_blocks, DataType type);
void alltoall_pairwise(const Collective& c, const void* send, void* recv, std::size_t count,
                       DataType type);
void alltoall_bruck(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type);

// gather.cpp: the root's recv gets rank j's send (send_count elements) as
// its block j; `blocks` matters at the root only. In place at the root when
// send is its own block of recv.
void gatherv(const Collective& c, const void* send, std::size_t send_count, void* recv,
             const BlockLayout& blocks, DataType type, int root, unsigned phase = 0);

// scatter.cpp: rank j's recv (recv_count elements) gets block j of the
// root's send; `blocks` matters at the root only. In place at the root when
// recv is its own block of send.
void scatterv(const Collective& c, const void* send, const BlockLayout& blocks, void* recv,
              std::size_t recv_count, DataType type, int root);

// barrier.cpp: returns once every rank has entered (dissemination).
void barrier(const Collective& c);

}  // namespace chorus::coll
