// The collectives other than AllReduce, each in a file of its own, all over
// the same Collective (transport, tag space, deadline, call check) as the
// AllReduce algorithms. Buffers are as the public API documents them
// (include/chorus/communicator.hpp); the Communicator has checked the
// arguments. Every function is correct for p >= 1 and count 0.
#pragma once

#include "coll/collective.hpp"

#include <chorus/types.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace chorus::coll {

// How a non-AllReduce call runs, for the call check and messages. Numbered
// after the AllReduce variants (selector.hpp), so that one byte of a call
// signature names either.
enum class Method : std::uint8_t {
  binomial_tree = 32,  // broadcast (small), reduce
  chain,               // broadcast (large): pipelined along the ring
  ring,                // allgather, reduce_scatter
  pairwise,            // alltoall
  dissemination,       // barrier
};
std::string_view method_name(Method m) noexcept;
// Variant names for AllReduce indices, method names above them.
std::string_view algorithm_name(std::uint8_t index) noexcept;

// Throws Error(unsupported) when p ranks need more ring steps than a call's
// tags can number (kMaxSteps).
void require_steps(int p, std::string_view collective);

// broadcast.cpp: root's `count` elements to every rank's `buffer`.
Method broadcast_method(std::size_t bytes, int p) noexcept;
void broadcast(const Collective& c, void* buffer, std::size_t count, DataType type, int root);

// reduce_to_root.cpp: recv (at root only) = op over all ranks of send.
// send == recv at root is in place.
void reduce_to_root(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type, ReduceOp op, int root);

// allgather.cpp: recv (p blocks of count) gets rank j's send in block j.
// In place when send == recv + rank * block.
void allgather(const Collective& c, const void* send, void* recv, std::size_t count,
               DataType type);

// reduce_scatter.cpp: send holds p blocks of count; recv (count) gets
// block `rank` reduced over all ranks. In place when recv == send + rank * block.
void reduce_scatter(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type, ReduceOp op);

// alltoall.cpp: block j of send goes to rank j, into block `rank` of its recv.
void alltoall(const Collective& c, const void* send, void* recv, std::size_t count,
              DataType type);

// barrier.cpp: returns once every rank has entered.
void barrier(const Collective& c);

}  // namespace chorus::coll
