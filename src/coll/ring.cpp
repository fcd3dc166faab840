#include "coll/ring.hpp"

#include "reduce/reduce.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace chorus::coll {
namespace {

// Segments of at most this many bytes travel and are reduced one by one.
constexpr std::size_t kSegmentBytes = 512 * 1024;

struct Chunking {
  std::size_t count, parts;
  std::size_t size(std::size_t c) const { return count / parts + (c < count % parts ? 1 : 0); }
  std::size_t offset(std::size_t c) const {
    return c * (count / parts) + std::min(c, count % parts);
  }
};

// Segment s of a chunk of `elements` elements, `seg_elems` elements each.
struct Span {
  std::size_t first, length;
};
Span segment(std::size_t elements, std::size_t seg_elems, std::size_t s) {
  const std::size_t first = s * seg_elems;
  return {first, std::min(seg_elems, elements - first)};
}

}  // namespace

void ring_allreduce(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type, ReduceOp op) {
  transport::Transport& t = c.transport;
  const std::size_t p = static_cast<std::size_t>(t.size());
  const std::size_t r = static_cast<std::size_t>(t.rank());
  const std::size_t esize = size_of(type);
  const bool in_place = send == recv;
  auto* out = static_cast<std::byte*>(recv);
  const auto* in = static_cast<const std::byte*>(send);
  if (p == 1) {
    if (!in_place && count) std::memcpy(out, in, count * esize);
    return;  // avg over one rank divides by 1
  }
  const int next = static_cast<int>((r + 1) % p), prev = static_cast<int>((r + p - 1) % p);
  const Chunking chunks{count, p};
  const std::size_t largest = chunks.size(0);
  const std::size_t seg_elems = std::max<std::size_t>(1, kSegmentBytes / esize);
  const std::size_t max_segments = std::max<std::size_t>(1, (largest + seg_elems - 1) / seg_elems);
  if (max_segments > kMaxSegments || p > kMaxSteps)
    throw Error(
        ErrorCode::unsupported,
        fmt::format("ring allreduce: {} elements over {} ranks exceeds the tag space", count, p));
  auto segments_of = [&](std::size_t elements) {
    return std::max<std::size_t>(1, (elements + seg_elems - 1) / seg_elems);
  };
  auto at = [&](std::byte* base, std::size_t chunk, std::size_t element) {
    return base + (chunks.offset(chunk) + element) * esize;
  };
  auto at_const = [&](const std::byte* base, std::size_t chunk, std::size_t element) {
    return base + (chunks.offset(chunk) + element) * esize;
  };

  // In place, incoming partial sums land in scratch (two steps' worth, so the
  // next step's receives can be posted while this one is reduced); out of
  // place they land straight in recv and are reduced with our send buffer.
  std::byte* scratch = in_place ? c.scratch_buffer(0, 2 * largest * esize) : nullptr;
  std::vector<transport::RequestPtr> sends;

  // ---- reduce-scatter: after p-1 steps, rank r owns chunk (r + 1) % p ------
  auto post_receives = [&](unsigned step, std::size_t chunk) {
    std::vector<transport::RequestPtr> reqs;
    const std::size_t n = chunks.size(chunk);
    for (std::size_t s = 0; s < segments_of(n); ++s) {
      const Span g = segment(n, seg_elems, s);
      std::byte* dst = in_place ? scratch + ((step % 2) * largest + g.first) * esize
                                : at(out, chunk, g.first);
      reqs.push_back(
          t.irecv(prev, c.message_tag(0, step, static_cast<unsigned>(s)), dst, g.length * esize));
    }
    return reqs;
  };
  {
    // Step 0 sends our own contribution of chunk r.
    const std::size_t n = chunks.size(r);
    for (std::size_t s = 0; s < segments_of(n); ++s) {
      const Span g = segment(n, seg_elems, s);
      sends.push_back(t.isend(next, c.message_tag(0, 0, static_cast<unsigned>(s)),
                              at_const(in, r, g.first), g.length * esize));
    }
  }
  auto receives = post_receives(0, (r + p - 1) % p);
  for (unsigned step = 0; step + 1 < p; ++step) {
    const std::size_t chunk = (r + 2 * p - 1 - step) % p;  // arriving this step
    std::vector<transport::RequestPtr> upcoming;
    if (step + 2 < p) upcoming = post_receives(step + 1, (r + 2 * p - 2 - step) % p);
    const std::size_t n = chunks.size(chunk);
    for (std::size_t s = 0; s < segments_of(n); ++s) {
      const Span g = segment(n, seg_elems, s);
      c.wait(*receives[s]);
      std::byte* dst = at(out, chunk, g.first);
      const std::byte* mine = at_const(in, chunk, g.first);
      if (in_place) {
        const std::byte* arrived = scratch + ((step % 2) * largest + g.first) * esize;
        reduce::reduce(dst, dst, arrived, g.length, type, op);
      } else {
        reduce::reduce(dst, dst, mine, g.length, type, op);
      }
      if (step + 2 < p) {  // forward the partial sum at once: the pipeline
        sends.push_back(t.isend(next, c.message_tag(0, step + 1, static_cast<unsigned>(s)), dst,
                                g.length * esize));
      } else if (op == ReduceOp::avg) {
        reduce::divide(dst, g.length, type, p);  // final: only the owner divides
      }
    }
    receives = std::move(upcoming);
  }
  // Partial sums still being sent live in the chunks the allgather writes.
  c.wait_all(sends);
  sends.clear();

  // ---- allgather: pass the finished chunks around the ring ---------------
  const std::size_t owned = (r + 1) % p;
  {
    const std::size_t n = chunks.size(owned);
    for (std::size_t s = 0; s < segments_of(n); ++s) {
      const Span g = segment(n, seg_elems, s);
      sends.push_back(t.isend(next, c.message_tag(1, 0, static_cast<unsigned>(s)),
                              at(out, owned, g.first), g.length * esize));
    }
  }
  for (unsigned step = 0; step + 1 < p; ++step) {
    const std::size_t chunk = (r + p - step) % p;  // arriving this step
    const std::size_t n = chunks.size(chunk);
    std::vector<transport::RequestPtr> reqs;
    for (std::size_t s = 0; s < segments_of(n); ++s) {
      const Span g = segment(n, seg_elems, s);
      reqs.push_back(t.irecv(prev, c.message_tag(1, step, static_cast<unsigned>(s)),
                             at(out, chunk, g.first), g.length * esize));
    }
    for (std::size_t s = 0; s < reqs.size(); ++s) {
      c.wait(*reqs[s]);
      if (step + 2 < p) {
        const Span g = segment(n, seg_elems, s);
        sends.push_back(t.isend(next, c.message_tag(1, step + 1, static_cast<unsigned>(s)),
                                at(out, chunk, g.first), g.length * esize));
      }
    }
  }
  c.wait_all(sends);
}

}  // namespace chorus::coll
