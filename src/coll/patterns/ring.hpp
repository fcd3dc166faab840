// The two phases of every ring algorithm, written once: AllReduce's ring is
// a reduce-scatter phase then an allgather phase; reduce_scatter's and
// allgather's rings are one phase each.
//
//   rank:      0       1       2       3         p = 4, blocks A B C D
//   step 0:   D0 ->   A1 ->   B2 ->   C3 ->(0)   each rank sends one block on
//   step 1:   C30->   D01->   A12->   B23->(0)   and adds its own part of the
//   step 2:   B230->  C301->  D012->  A123->(0)  block that arrives
//   after:    A(all)  B(all)  C(all)  D(all)     (finish = 0: rank r owns block r)
//
// Every block is cut into segments of kRingSegmentBytes; a segment is
// reduced and forwarded as soon as it arrives, and the next step's
// receives are posted before this step's segments are reduced, so sending
// segment k + 1 overlaps reducing segment k. Each rank sends and receives
// (p - 1) blocks per phase, the least possible. Blocks may differ in size
// and be empty (v-forms); every rank runs the same schedule.
#pragma once

#include "coll/collectives.hpp"

#include <chorus/types.hpp>

#include <cstddef>
#include <functional>
#include <vector>

namespace chorus::coll {

inline constexpr std::size_t kRingSegmentBytes = 512 * 1024;
// In place, segments land in scratch first, at most this many per step at
// a time (ring.cpp says why).
inline constexpr std::size_t kLandingSegments = 4;

struct RingReduceScatter {
  const BlockLayout& blocks;  // p blocks of `input` (element counts and offsets)
  DataType type;
  ReduceOp op;
  const std::byte* input;     // this rank's contribution to every block
  // Where the partial sum of block j (never this rank's finished one) is
  // kept while it is forwarded. Each block passes a rank once, so each
  // may have its own place; it may be where `input` has block j.
  std::function<std::byte*(int block)> partial;
  std::byte* result;          // this rank's finished block (may be its input block)
  int finish = 0;             // rank r finishes block (r + finish) % p
  unsigned phase = 0;         // the half of the call's tag space used
  // The ring's ranks in order (null: rank order). Then "rank r" above is
  // the position in it: blocks belong to positions, for AllReduce only
  // (see ring_allreduce: across hosts, each host's ranks kept together).
  const std::vector<int>* order = nullptr;
  // In place (`result` where `input` has that block): sum the last step
  // straight into the input, for a caller whose block there is in lines
  // this rank holds alone (ring_allreduce), instead of summing in the
  // landing scratch and copying over.
  bool result_into_input = false;
};
// This rank's position on a ring of `order` (null: its rank).
int ring_position(const transport::Transport& t, const std::vector<int>* order);

// Runs the phase: `result` holds block (r + finish) % p reduced over all
// ranks (avg: divided by p) when it returns, and every send has ended.
void ring_reduce_scatter(const Collective& c, const RingReduceScatter& ring);

// Rank r holds block (r + start) % p of `buffer` (laid out by `blocks`,
// `esize` bytes per element); when it returns every rank holds every block.
// With `own` set, rank r's block is read from there instead (out of place):
// it is sent from `own` and copied into `buffer` while the first step's
// messages are in flight, so the copy costs no step of its own.
// `order`: as RingReduceScatter's.
void ring_allgather(const Collective& c, const BlockLayout& blocks, std::size_t esize,
                    std::byte* buffer, int start, unsigned phase,
                    const std::byte* own = nullptr, const std::vector<int>* order = nullptr);

}  // namespace chorus::coll
