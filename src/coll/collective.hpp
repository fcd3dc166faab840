// What every collective algorithm receives: the transport, this call's tag
// space, its deadline, and the call check that runs beside it. Algorithms
// see no sockets, stores or endpoints.
//
// Tags: every message of one collective call carries the call's sequence
// number (its low 15 bits) below the top bit of the 40-bit transport tag, so
// that two calls in flight never mix; the rest says which message of the
// call it is (phase, step, segment), laid out by message_tag(). Segment
// kCheckSegment belongs to the call check (coll/call_check.hpp). The top
// bit (kPointToPointTagBit) is never a collective's: point-to-point messages
// (Communicator::send/recv) carry it, so they cannot match a collective's.
//
// Algorithms wait only through wait()/wait_all(): they keep the call check
// moving, and on any error they abort the transport before the algorithm's
// buffers go away, so no pending request outlives the memory it points to.
#pragma once

#include "transport/transport.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <span>

namespace chorus::shm {
class Segment;
}

namespace chorus::coll {

class CallCheck;
struct CallSignature;
class Topology;

inline constexpr transport::Tag kPointToPointTagBit = transport::Tag{1} << (transport::kTagBits - 1);

// Scratch memory that outlives one call: a communicator keeps one, so that
// an algorithm's temporary buffers are allocated (and faulted in, and
// registered by UCX) once, not on every call. Slots let one call hold
// several buffers at once. Not thread-safe: one call runs at a time.
class Scratch {
 public:
  static constexpr unsigned kSlots = 4;
  // Every buffer starts on a page boundary, as the user's buffers of a
  // benchmark or a framework's tensors do. A plain new[] of a large buffer
  // starts 16 bytes past one (malloc's header), so each 64-byte vector
  // load of a reduce reading it straddled two cache lines and a
  // cross-memory copy into it touched a page more: the in-place ring's
  // reduce out of its landing area took 2-3x the time of out of place's
  // at p = 2 (docs/performance.md, twenty-first pass).
  static constexpr std::size_t kAlignment = 4096;
  // At least `bytes` bytes, contents unspecified; valid until the next get()
  // of the same slot.
  std::byte* get(unsigned slot, std::size_t bytes);

 private:
  struct AlignedDelete {
    void operator()(std::byte* p) const noexcept {
      ::operator delete[](p, std::align_val_t{kAlignment});
    }
  };
  struct Buffer {
    std::unique_ptr<std::byte[], AlignedDelete> data;
    std::size_t bytes = 0;
  };
  Buffer buffers_[kSlots];
};

inline constexpr unsigned kMaxSteps = 2048;
inline constexpr unsigned kMaxSegments = 4095;  // segments 0..4094
inline constexpr unsigned kCheckSegment = 4095;

struct Collective {
  transport::Transport& transport;
  std::uint64_t sequence;  // this call's number on its communicator (from 1; 0: set-up and probe)
  transport::Deadline deadline;
  CallCheck* check = nullptr;  // none in algorithm-only tests
  // Set (by another thread) to make every wait end with ErrorCode::aborted.
  const std::atomic<bool>* abort_requested = nullptr;
  Scratch* scratch = nullptr;  // none: a per-thread one is used
  // When every rank is on one host: the memory they share (shm/segment.hpp),
  // for the shared-memory algorithms (coll/shared_memory.hpp) and the call
  // check. Null otherwise.
  shm::Segment* host = nullptr;
  // When the ranks are on several hosts: the segment of this rank's host
  // (its ranks are the host's, by local rank), for
  // shm_hierarchical_allreduce; every call marks its slot there. Null
  // otherwise.
  shm::Segment* own_host = nullptr;
  // This call's signature, when the call check is on: the shared-memory
  // algorithms carry it in their own exchange (they run with check == null).
  const CallSignature* signature = nullptr;
  // Which ranks share a host (coll/topology.hpp), for the hierarchical
  // algorithms; null: all on one.
  const Topology* topology = nullptr;

  // `bytes` of scratch memory in `slot` (see Scratch).
  std::byte* scratch_buffer(unsigned slot, std::size_t bytes) const;

  // phase < 2, step < kMaxSteps, segment <= kCheckSegment.
  transport::Tag message_tag(unsigned phase, unsigned step, unsigned segment) const {
    return (static_cast<transport::Tag>(sequence & 0x7FFFu) << 24) |
           (static_cast<transport::Tag>(phase & 1u) << 23) |
           (static_cast<transport::Tag>(step & 0x7FFu) << 12) | (segment & 0xFFFu);
  }

  // Transport::wait with the call check polled (and `also`, when given:
  // an algorithm that drives several schedules at once advances them while
  // it waits for one); on error, see fail().
  void wait(const transport::Request& request, const std::function<void()>& also = nullptr) const;
  // Until every request ends; the first failure among them ends the call.
  void wait_all(std::span<const transport::RequestPtr> requests) const;

  // Ends the call with `error`: when the call check has not finished, it
  // gets a moment to finish, and its mismatch (the cause, when ranks called
  // differently) replaces `error`; then the transport is aborted with the
  // reason, which fails every pending request and tells the peers, and the
  // error is thrown.
  [[noreturn]] void fail(const Error& error) const;

 private:
  // What a wait runs after each progress pass: the abort flag, the call
  // check and `also` (held by reference: it must outlive the wait); null
  // when there is nothing to run.
  std::function<void()> poller(const std::function<void()>& also) const;
};

}  // namespace chorus::coll
