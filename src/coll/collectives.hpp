// The collectives other than AllReduce, each in a file of its own, all over
// the same Collective (transport, tag space, deadline, call check) as the
// AllReduce algorithms. Buffers are as the public API documents them
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

// How a non-AllReduce call runs, for the call check and messages. Numbered
// after the AllReduce variants (selector.hpp), so that one byte of a call
// signature names either.
enum class Method : std::uint8_t {
  binomial_tree = 32,     // broadcast (small), reduce (small)
  chain,                  // broadcast (large): pipelined along the ring
  ring,                   // allgather(v), reduce_scatter(_v)
  pairwise,               // alltoall(v)
  dissemination,          // barrier
  bruck,                  // allgather, alltoall (small): ceil(log2 p) steps
  linear,                 // gather(v), scatter(v): the root talks to each rank
  reduce_scatter_gather,  // reduce (large): ring reduce-scatter, then gather
  recursive_halving,      // reduce_scatter (small, p a power of two)
};
std::string_view method_name(Method m) noexcept;
// Variant names for AllReduce indices, method names above them.
std::string_view algorithm_name(std::uint8_t index) noexcept;

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
Method broadcast_method(std::size_t bytes, int p) noexcept;
void broadcast(const Collective& c, void* buffer, std::size_t count, DataType type, int root);

// reduce_to_root.cpp: recv (at root only) = op over all ranks of send.
// send == recv at root is in place.
Method reduce_method(std::size_t bytes, int p) noexcept;
void reduce_to_root(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type, ReduceOp op, int root);

// allgather.cpp: recv (p blocks of count) gets rank j's send in block j.
// In place when send == recv + rank * block.
Method allgather_method(std::size_t bytes_per_rank, int p) noexcept;
void allgather(const Collective& c, const void* send, void* recv, std::size_t count,
               DataType type);
// recv's block j (as `blocks` lays it out) gets rank j's send; in place
// when send is this rank's block of recv.
void allgatherv(const Collective& c, const void* send, void* recv, const BlockLayout& blocks,
                DataType type, unsigned phase = 0);

// reduce_scatter.cpp: send holds p blocks, counts[j] elements each, back to
// back; recv (counts[rank]) gets block `rank` reduced over all ranks. In
// place when recv is this rank's block of send.
Method reduce_scatter_method(std::size_t total_bytes, int p) noexcept;
void reduce_scatter_v(const Collective& c, const void* send, void* recv,
                      std::span<const std::size_t> counts, DataType type, ReduceOp op,
                      unsigned phase = 0);
void reduce_scatter(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type, ReduceOp op);

// alltoall.cpp: send's block j goes to rank j, into its recv's block
// `rank`. Blocks as the layouts say; send_blocks.counts[j] on this rank must
// equal recv_blocks.counts[rank] on rank j.
void alltoallv(const Collective& c, const void* send, const BlockLayout& send_blocks, void* recv,
               const BlockLayout& recv_blocks, DataType type);
Method alltoall_method(std::size_t block_bytes, int p) noexcept;
void alltoall(const Collective& c, const void* send, void* recv, std::size_t count,
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

// barrier.cpp: returns once every rank has entered.
void barrier(const Collective& c);

}  // namespace chorus::coll
