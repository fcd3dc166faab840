// The host segment: memory shared by the ranks of one communicator that run
// on one host, for the collectives that go straight through memory
// (coll/shared_memory.hpp) and for the call check of every call.
//
// Layout: a header, a wake word, an abort notice, one record per rank (its
// pid, for liveness) and two slots per rank. A slot is a 48-byte header
// (the call's sequence number, the call's signature, the bytes that follow)
// followed by up to slot_bytes() of data. Call s writes only its own rank's
// slot s % 2 (single writer, any readers), and only once every rank has
// begun call s - 1, which each does only after it finished reading call s - 2,
// the last user of that slot: so no slot is overwritten while it is read,
// with no reference counts and no allocation on the way.
//
// Waiting: a waiter polls for spin_before_sleep(), yielding when the host
// has more ranks than cores, then sleeps on a futex in the segment that
// every publish bumps (and wakes only when someone sleeps). Every 10 ms it
// also looks at the abort notice and the deadline, and every 100 ms at
// whether the ranks it waits for are still alive (their pid and start time),
// so a rank killed while others wait on its slot is named within a fraction
// of a second.
//
// Naming and cleanup: the lowest rank creates "/chorus.<pid>.<random>" with
// O_EXCL, the others open it, and once all have mapped it (or any failed) it
// is unlinked: a job that dies later leaves nothing behind. Segments of
// creators that died during that window are removed by the next creator on
// the host (a name whose pid is gone). A segment whose header does not say
// what its creator announced (another job's, a stale one, garbage) is
// refused by size and fields, never trusted.
#pragma once

#include "transport/transport.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace chorus::shm {

// A spinning wait's pause between looks: the line it polls is the one a
// peer is writing, and back-to-back reads keep taking it away from the
// writer between its stores.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// A slot begins on a cache line with this header; its data follows at once,
// so that a small call's data (up to 16 bytes) shares the header's line:
// one cache line moves between cores per rank and call.
struct SlotHeader {
  std::atomic<std::uint64_t> sequence{0};  // the call this slot holds; 0: none yet
  std::uint64_t bytes = 0;                 // data bytes that follow
  std::byte signature[24] = {};            // the call's coll::CallSignature
  // A second step's mark (two-shot AllReduce: this rank's reduced chunk is
  // written), with the same call number; the same rules as `sequence`.
  std::atomic<std::uint64_t> second{0};
};
static_assert(sizeof(SlotHeader) == 48);

// A fixed-size all-gather of `bytes` from every rank into `out` (rank order),
// over whatever the communicator already has (its transport).
using Allgather = std::function<void(const void* mine, std::size_t bytes, void* out)>;

class Segment {
 public:
  // Collective: every rank of the communicator calls it with the same
  // `slot_bytes`. Returns null on every rank (and logs why at INFO) when the
  // ranks are not all on one host (hostname, boot id, network and pid
  // namespaces), or when any rank cannot create or map the segment (logged
  // at WARN, naming the rank and errno). `members`: when the segment's ranks
  // are some of a communicator's (one host's, across hosts), the
  // communicator rank of each, by which messages name them; empty: the
  // segment's ranks are the communicator's.
  static std::unique_ptr<Segment> attach(int rank, int size, std::size_t slot_bytes,
                                         const Allgather& allgather,
                                         std::vector<int> members = {});
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  const std::string& name() const noexcept { return name_; }
  // The communicator rank of the segment's rank `q` (what messages say).
  int comm_rank(int q) const noexcept {
    return members_.empty() ? q : members_[static_cast<std::size_t>(q)];
  }

  SlotHeader& header(int rank, std::uint64_t sequence) const noexcept {
    const std::size_t index = static_cast<std::size_t>(rank) * 2 + (sequence & 1);
    return *reinterpret_cast<SlotHeader*>(slots_ + index * slot_stride_);
  }
  std::byte* data(int rank, std::uint64_t sequence) const noexcept {
    return reinterpret_cast<std::byte*>(&header(rank, sequence)) + sizeof(SlotHeader);
  }
  // Whether `rank` has begun call `sequence` (its slot for it says so; the
  // slot holds that call or the one two before, never a later one).
  bool has_begun(int rank, std::uint64_t sequence) const noexcept {
    return header(rank, sequence).sequence.load(std::memory_order_acquire) >= sequence;
  }

  // Before writing this rank's slot for call `sequence`: waits until every
  // rank has begun call sequence - 1 (nearly always at once).
  template <class Poll>
  void wait_until_writable(std::uint64_t sequence, transport::Deadline deadline, Poll&& poll) {
    int behind = 0;
    auto everyone_began_previous = [&] {
      for (; behind < size_; ++behind)
        if (behind != rank_ && !has_begun(behind, sequence - 1)) return false;
      return true;
    };
    wait(everyone_began_previous, deadline, poll,
         [&] { return describe_writable_wait(behind, sequence); });
  }
  // Makes this rank's slot for `sequence` visible (signature and data
  // written before) and wakes sleepers.
  void publish(std::uint64_t sequence, std::uint64_t bytes);
  // Marks this rank's second step of call `sequence` done (what it wrote
  // for it is visible); wakes sleepers.
  void publish_second(std::uint64_t sequence);
  bool has_done_second(int rank, std::uint64_t sequence) const noexcept {
    return header(rank, sequence).second.load(std::memory_order_acquire) >= sequence;
  }

  // Until `ready()`; `poll` runs every 10 ms of sleeping (it may throw: the
  // abort flag, the call check). Throws Error(timeout) at the deadline
  // naming `what()`, Error(peer_failure) when a rank of the segment died or
  // announced an abort.
  template <class Ready, class Poll, class What>
  void wait(Ready&& ready, transport::Deadline deadline, Poll&& poll, What&& what) {
    for (int spins = 0; spins < kFastSpins; ++spins) {
      if (ready()) return;
      cpu_relax();
    }
    // Only a wait that did not end at once pays for the type erasure.
    wait_slowly(std::function<bool()>(std::ref(ready)), deadline,
                std::function<void()>(std::ref(poll)), std::function<std::string()>(std::ref(what)));
  }

  // Tells every rank (waiting or later waiting) that this rank failed, with
  // `reason`; wakes sleepers. Idempotent; the first reason stays.
  void announce_abort(const std::string& reason) noexcept;
  // Throws Error(peer_failure) naming the rank and its reason, when one has
  // announced an abort.
  void throw_if_aborted() const;
  // Wakes every sleeper (an abort from another thread of this process).
  void wake_all() noexcept;

 private:
  struct Layout;
  Segment(int rank, int size, std::size_t slot_bytes, std::string name, void* base,
          std::size_t length, std::vector<int> members);
  void wait_slowly(const std::function<bool()>& ready, transport::Deadline deadline,
                   const std::function<void()>& poll, const std::function<std::string()>& what);
  void check_alive() const;
  std::string describe_writable_wait(int behind, std::uint64_t sequence) const;

  static constexpr int kFastSpins = 64;
  const int rank_, size_;
  const std::size_t slot_bytes_;
  const std::string name_;
  void* const base_;
  const std::size_t length_;
  std::byte* const slots_;          // rank 0's first slot
  const std::size_t slot_stride_;  // from one slot to the next
  bool oversubscribed_ = false;  // more ranks on the host than cores for them (or see the constructor)
  const std::vector<int> members_;  // see attach()
};

// The bytes of a segment for `size` ranks and `slot_bytes` per slot.
std::size_t segment_bytes(int size, std::size_t slot_bytes) noexcept;

// Removes "/dev/shm/chorus.<pid>.*" segments whose creating process is gone;
// returns how many. (Creators call it; a test too.)
int remove_stale_segments();

}  // namespace chorus::shm
