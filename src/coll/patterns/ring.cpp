#include "coll/patterns/ring.hpp"

#include "common/copy.hpp"
#include "reduce/reduce.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace chorus::coll {
namespace {

struct Segments {
  std::size_t per_segment;  // elements
  std::size_t count(std::size_t elements) const {
    return std::max<std::size_t>(1, (elements + per_segment - 1) / per_segment);  // empty: one, empty
  }
  std::size_t first(std::size_t s) const { return s * per_segment; }
  std::size_t length(std::size_t elements, std::size_t s) const {
    return std::min(per_segment, elements - std::min(elements, first(s)));
  }
};

Segments segments_for(const Collective& c, const BlockLayout& blocks, std::size_t esize,
                      std::string_view what) {
  const int p = c.transport.size();
  require_steps(p, what);
  const Segments seg{std::max<std::size_t>(1, kRingSegmentBytes / esize)};
  const std::size_t largest = *std::max_element(blocks.counts.begin(), blocks.counts.end());
  if (seg.count(largest) > kMaxSegments)
    throw Error(ErrorCode::unsupported,
                fmt::format("{}: a block of {} elements over {} ranks exceeds the tag space", what,
                            largest, p));
  return seg;
}

}  // namespace

int ring_position(const transport::Transport& t, const std::vector<int>* order) {
  if (order == nullptr) return t.rank();
  return static_cast<int>(std::find(order->begin(), order->end(), t.rank()) - order->begin());
}

namespace {

// This rank's position on the ring and its neighbours' ranks.
struct RingPlace {
  int position, next, prev;
};
RingPlace ring_place(const transport::Transport& t, const std::vector<int>* order) {
  const int p = t.size(), r = ring_position(t, order);
  auto rank_at = [&](int position) {
    return order == nullptr ? position : (*order)[static_cast<std::size_t>(position)];
  };
  return {r, rank_at((r + 1) % p), rank_at((r - 1 + p) % p)};
}

}  // namespace

void ring_reduce_scatter(const Collective& c, const RingReduceScatter& ring) {
  transport::Transport& t = c.transport;
  const RingPlace place = ring_place(t, ring.order);
  const int p = t.size(), r = place.position;
  const std::size_t esize = size_of(ring.type);
  const BlockLayout& blocks = ring.blocks;
  if (p == 1) {  // the one block is this rank's input (avg over one rank divides by 1)
    const std::size_t bytes = blocks.counts[0] * esize;
    const std::byte* own = ring.input + blocks.displs[0] * esize;
    if (ring.result != own) copy_memory(ring.result, own, bytes);
    return;
  }
  const Segments seg = segments_for(c, blocks, esize, "reduce-scatter ring");
  const int next = place.next, prev = place.prev;
  auto block_of = [&](int x) { return ((x % p) + p) % p; };
  const auto n = [&](int j) { return blocks.counts[static_cast<std::size_t>(j)]; };
  const auto mine = [&](int j, std::size_t element) {
    return ring.input + (blocks.displs[static_cast<std::size_t>(j)] + element) * esize;
  };
  const int last_step = p - 2;
  auto dest = [&](int j, int step) { return step == last_step ? ring.result : ring.partial(j); };
  // A segment lands where its sum goes, unless that is where this rank's own
  // part of the block is (in place): then in scratch, in a window of
  // kLandingSegments segments per step parity (so that the next step's
  // receives can be posted early). A segment's receive is posted once its
  // landing place is free again, so the scratch is 4 MiB and stays in
  // cache, where a landing area of two whole blocks (64 MiB for 64 MiB at
  // p = 2) went to memory and back: with inputs rewritten before every
  // call (allreduce_perf --rewrite), in place 1.11-1.27x faster at 16-64
  // MiB, p = 2 (docs/performance.md, fifth pass).
  const auto in_scratch = [&](int j, int step) { return dest(j, step) == mine(j, 0); };
  std::byte* landing_area = nullptr;
  auto landing = [&](int j, int step, std::size_t s) -> std::byte* {
    if (!in_scratch(j, step)) return dest(j, step) + seg.first(s) * esize;
    const std::size_t window_bytes = kLandingSegments * seg.per_segment * esize;
    if (landing_area == nullptr) landing_area = c.scratch_buffer(1, 2 * window_bytes);
    return landing_area + static_cast<std::size_t>(step % 2) * window_bytes +
           s % kLandingSegments * seg.per_segment * esize;
  };
  auto post_receive = [&](int j, int step, std::size_t s) {
    return t.irecv(prev, c.message_tag(ring.phase, static_cast<unsigned>(step), static_cast<unsigned>(s)),
                   landing(j, step, s), seg.length(n(j), s) * esize);
  };
  // The step's receives; those beyond the window stay null until posted.
  auto post_receives = [&](int step) {
    const int j = block_of(r - 2 + ring.finish - step);
    std::vector<transport::RequestPtr> receives(seg.count(n(j)));
    const std::size_t posted = in_scratch(j, step) ? std::min(receives.size(), kLandingSegments)
                                                   : receives.size();
    for (std::size_t s = 0; s < posted; ++s) receives[s] = post_receive(j, step, s);
    return receives;
  };

  std::vector<transport::RequestPtr> sends;
  {  // Step 0 sends this rank's own part of the block it starts.
    const int j = block_of(r - 1 + ring.finish);
    for (std::size_t s = 0; s < seg.count(n(j)); ++s)
      sends.push_back(t.isend(next, c.message_tag(ring.phase, 0, static_cast<unsigned>(s)),
                              mine(j, seg.first(s)), seg.length(n(j), s) * esize));
  }
  auto receives = post_receives(0);
  for (int step = 0; step <= last_step; ++step) {
    const int j = block_of(r - 2 + ring.finish - step);  // arriving this step
    std::vector<transport::RequestPtr> upcoming;
    if (step < last_step) upcoming = post_receives(step + 1);
    for (std::size_t s = 0; s < receives.size(); ++s) {
      c.wait(*receives[s]);
      const std::size_t first = seg.first(s), length = seg.length(n(j), s);
      std::byte* sum = dest(j, step) + first * esize;
      std::byte* arrived = landing(j, step, s);
      if (length && (arrived == sum || (step == last_step && ring.result_into_input))) {
        reduce::reduce(sum, arrived, mine(j, first), length, ring.type, ring.op);
      } else if (length) {
        // In place the sum belongs where this rank's input is, in lines a
        // peer read last (the previous call's allgather). Reducing into them
        // loads each line shared and then stores to it, two coherence round
        // trips a line: 4x slower than reducing in the private landing area
        // and copying over, whose string stores take lines whole (p = 2,
        // 1 MiB: 190-280 us against 64 us).
        reduce::reduce(arrived, arrived, mine(j, first), length, ring.type, ring.op);
        copy_memory(sum, arrived, length * esize);
      }
      if (length && arrived != sum)  // the landing place is free again
        if (const std::size_t later = s + kLandingSegments; later < receives.size())
          receives[later] = post_receive(j, step, later);
      if (step < last_step)  // forward the partial sum at once: the pipeline
        sends.push_back(t.isend(next, c.message_tag(ring.phase, static_cast<unsigned>(step + 1),
                                                    static_cast<unsigned>(s)),
                                sum, length * esize));
      else if (ring.op == ReduceOp::avg && length)
        reduce::divide(sum, length, ring.type, static_cast<std::size_t>(p));  // only the owner divides
    }
    receives = std::move(upcoming);
  }
  c.wait_all(sends);
}

void ring_allgather(const Collective& c, const BlockLayout& blocks, std::size_t esize,
                    std::byte* buffer, int start, unsigned phase, const std::byte* own,
                    const std::vector<int>* order) {
  transport::Transport& t = c.transport;
  const RingPlace place = ring_place(t, order);
  const int p = t.size(), r = place.position;
  const int first = ((r + start) % p + p) % p;
  std::byte* own_place = buffer + blocks.offset(first, esize);
  if (own == own_place) own = nullptr;
  const auto copy_own = [&] {
    if (own != nullptr) copy_memory(own_place, own, blocks.bytes(first, esize));
  };
  if (p == 1) return copy_own();
  const Segments seg = segments_for(c, blocks, esize, "allgather ring");
  const int next = place.next, prev = place.prev;
  auto block_of = [&](int x) { return ((x % p) + p) % p; };
  const auto n = [&](int j) { return blocks.counts[static_cast<std::size_t>(j)]; };
  const auto at = [&](int j, std::size_t element) {
    return buffer + (blocks.displs[static_cast<std::size_t>(j)] + element) * esize;
  };
  std::vector<transport::RequestPtr> sends;
  {
    const std::byte* from = own != nullptr ? own : own_place;
    for (std::size_t s = 0; s < seg.count(n(first)); ++s)
      sends.push_back(t.isend(next, c.message_tag(phase, 0, static_cast<unsigned>(s)),
                              from + seg.first(s) * esize, seg.length(n(first), s) * esize));
  }
  for (int step = 0; step + 1 < p; ++step) {
    const int j = block_of(r + start - 1 - step);  // arriving this step
    std::vector<transport::RequestPtr> receives;
    for (std::size_t s = 0; s < seg.count(n(j)); ++s)
      receives.push_back(t.irecv(prev, c.message_tag(phase, static_cast<unsigned>(step),
                                                     static_cast<unsigned>(s)),
                                 at(j, seg.first(s)), seg.length(n(j), s) * esize));
    if (step == 0) copy_own();  // while the first messages are in flight
    for (std::size_t s = 0; s < receives.size(); ++s) {
      c.wait(*receives[s]);
      if (step + 2 < p)  // forward each segment as soon as it is here
        sends.push_back(t.isend(next, c.message_tag(phase, static_cast<unsigned>(step + 1),
                                                    static_cast<unsigned>(s)),
                                at(j, seg.first(s)), seg.length(n(j), s) * esize));
    }
  }
  c.wait_all(sends);
}

}  // namespace chorus::coll
