// The host segment: memory shared by the ranks of one communicator that run
// on one host, for the collectives that go straight through memory
// (coll/shared_memory.hpp) and for the call check of every call.
//
// Layout: a header, a wake word, an abort notice, one record per rank (its
// pid, for liveness), one "retired" word per rank, kRingDepth signature
// digests per rank, a ring of kRingDepth entries per rank, a data ring
// per rank and two large slots per rank. Call s writes only its own
// rank's entry s % kRingDepth (single writer, any readers): a 32-byte
// header (the call's sequence number, most of its signature, the bytes
// written) followed by up to kEntryDataBytes of data, or, for more, a word
// naming where it is: its large slot s % 2 (up to slot_bytes()), or, for
// up to kDataRingMaxBytes where that slot is not free yet and waits
// yield, the next blocks of its data ring in turn; then a 16-byte tail
// (the rest of the signature, a word for a call's second step); and its
// digest word s % kRingDepth.
//
// Reuse without reference counts or allocation: a rank reads what a call
// wrote within that call, except one thing: every rank compares its
// successor's signatures with its own up to kRingDepth calls late (the
// call check of the calls that read no peer's slot: a broadcast's root, a
// reduce's other ranks), by their digests (each covers every call up to
// its own, so one word read compares many calls), and says how far it has
// compared in its retired word. So an entry is rewritten only once every
// rank has retired the call it holds, and data elsewhere only once every
// rank has begun the call after the last that wrote there (each does that
// only after it finished reading the one before): a large slot, whose
// last call was at most s - 2, once every rank has begun s - 1; a block of
// the data ring, last written a ring's worth of data before, nearly always
// at once. A rooted call's writer thus runs ahead of its readers, as MPI's
// eager messages let it: up to kRingDepth calls less the 17-144 by which a
// reader's retired word trails its calls (begin_slot() in
// coll/shared_memory.cpp), as far as kDataRingBytes holds of data in the
// data ring, and one call of data in large slots.
//
// Waiting: a waiter polls for spin_before_sleep(), yielding when the ranks
// are more than the CPUs they may run on between them, then sleeps on a futex in the segment that
// every publish bumps (and wakes only when someone sleeps; without a fence
// where every rank registered for membarrier(), see store_and_wake()). Every 10 ms it
// also looks at the abort notice and the deadline, and every 100 ms at
// whether the ranks it waits for are still alive (their pid and start time),
// so a rank killed while others wait on its slot is named within a fraction
// of a second. A thread with a wait hook (common/wait_hook.hpp) runs it
// while it spins and sleeps at most kHookedSleep at a time.
//
// Naming and cleanup: the lowest rank creates "/chorus.<pid>.<random>" with
// O_EXCL, the others open it, and once all have mapped it (or any failed) it
// is unlinked: a job that dies later leaves nothing behind. Every rank then
// maps in the pages before the large slots (rings()), which every call
// touches. Segments of creators that died during that window are removed
// by the next creator on the host (a name whose pid is gone). A segment
// whose header does not say what its creator announced (another job's, a
// stale one, garbage) is refused by size and fields, never trusted.
#pragma once

#include "transport/transport.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
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

// Asks for a cache line ahead of its use, for writing (taken from the
// readers that hold it) or for reading (fetched from the writer that has
// it): the transfer overlaps the caller's work instead of stalling a
// later store or load. A hint only; nothing on other architectures.
inline void prefetch_for_write(const void* line) noexcept {
#if defined(__x86_64__)
  // PREFETCHW (0F 0D /1): on CPUs without it, a no-op of the same encoding.
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(line)));
#endif
}
inline void prefetch_for_read(const void* line) noexcept { __builtin_prefetch(line, 0, 3); }

// A ring entry begins on a cache line with this header; small data follows
// at once, so that a small call's data (up to 32 bytes) shares the header's
// line: one cache line moves between cores per rank and call. What a small
// call's readers need not read is in the entry's last 16 bytes (EntryTail).
struct SlotHeader {
  std::atomic<std::uint64_t> sequence{0};  // the call this entry holds; 0: none yet
  // The data bytes written (below 2 GiB), and in the top bit whether they
  // are elsewhere (the rank's data ring or large slot: the entry's first
  // data word says where, Segment::data()) rather than after this header.
  std::uint32_t size_and_place = 0;
  // How far a stream has got, 0 when the entry is claimed (Segment::
  // stream()): a streaming writer's bytes written so far (two-shot
  // AllReduce: its rounds), or a reader's of a stream larger than the
  // slot, the bytes it has consumed.
  std::atomic<std::uint32_t> streamed{0};
  // The call's signature (coll::CallSignature, kSignatureBytes): its first
  // kSignatureHeadBytes here, the rest (the v-forms' layout hash, 0 for
  // every other call) in the tail.
  std::byte signature[16] = {};

  static constexpr std::uint32_t kInSlot = 1u << 31;
  std::size_t bytes() const noexcept { return size_and_place & ~kInSlot; }
  bool in_entry() const noexcept { return (size_and_place & kInSlot) == 0; }
};
static_assert(sizeof(SlotHeader) == 32);

// A ring entry's last 16 bytes.
struct EntryTail {
  std::byte signature_rest[8] = {};  // see SlotHeader::signature
  // 0 when the entry is claimed; then either a second step's mark (the
  // hierarchical AllReduce's leader: the result is written), with the same
  // call number, or the rounds this rank has reduced (two-shot AllReduce),
  // or, in a call where every rank streams and reads streams (a large
  // allgather or alltoall), the bytes this rank has consumed of every
  // other's.
  std::atomic<std::uint64_t> second{0};
};
static_assert(sizeof(EntryTail) == 16);

// The bytes of a call's signature an entry holds, and of them the header's.
inline constexpr std::size_t kSignatureBytes = 24;
inline constexpr std::size_t kSignatureHeadBytes = sizeof(SlotHeader::signature);
inline constexpr std::size_t kSignatureRestBytes = sizeof(EntryTail::signature_rest);
static_assert(kSignatureHeadBytes + kSignatureRestBytes == kSignatureBytes);

// The unit of the segment's layout: records, words and entries begin on one.
inline constexpr std::size_t kCacheLine = 64;

// The calls a rank's ring holds: how far a rooted call's writer may run
// ahead of its readers, and how late a signature may be compared. 256, not
// 64: the deeper run-ahead made 8-byte broadcasts and reduces at p = 4 on
// 2 cores 1.7-2x faster and through libchorus_pmpi at p = 2 11-19% faster,
// AllReduce unchanged (docs/performance.md "Sixteenth pass"). With the
// entries below, 128 KiB of the segment per rank.
inline constexpr std::uint64_t kRingDepth = 256;
// The bytes of a ring entry, and of data that goes in it (between the
// header and the tail) rather than in a slot. 512, not 256: a
// 256-byte AllReduce at p = 2 then has its data in the entry (464 bytes
// fit), 0.62 -> 0.55 us, where in the large slot it ran at 0.95x of Open
// MPI (docs/performance.md "Sixteenth pass"). (384 measured 64-128 B
// calls about 10% slower in one series; the cause was not looked for.)
inline constexpr std::size_t kEntryBytes = 512;
inline constexpr std::size_t kEntryDataBytes = kEntryBytes - sizeof(SlotHeader) - sizeof(EntryTail);
// Each rank's signature digests (Segment::digest()), one word per ring
// entry, eight calls to a cache line. Each digest covers the call's
// signature and every earlier call's: one word read tells whether two
// ranks agree on every call up to it. From one rank's digests to the next:
// a line more than the words, as kRingStride below.
inline constexpr std::size_t kDigestsPerLine = kCacheLine / 8;
inline constexpr std::size_t kDigestStride = kRingDepth * 8 + kCacheLine;
// From one rank's ring to the next: a cache line more than the entries, so
// that two ranks' entries of one call differ in their low 12 address bits
// (a load from a peer's entry that matched this rank's last store there
// would wait on it as if they were one address: "4K aliasing").
inline constexpr std::size_t kRingStride = kRingDepth * kEntryBytes + kCacheLine;
// Data of more than kEntryDataBytes goes in the writer's large slot of the
// call's parity, or, up to kDataRingMaxBytes where that is not free yet
// and waits yield (Segment::choose_place()), in its data ring: the next
// whole blocks of kDataBlockBytes in turn, from its start again where they
// would cross its end. With the two large slots alone, a rooted call's
// writer of a few hundred bytes could begin a call only once every reader
// had begun the one before: at p = 4 on 2 cores every 512-byte scatter,
// gather, broadcast or reduce then cost a switch of core (7.6-8.4 us, Open
// MPI 2.1 for a 128-byte scatter). Sixteen places of 4 KiB each made it
// 1.1-1.7 us, 64 places 0.7-1.4: the further a writer may run ahead, the
// fewer the switches. A ring of blocks holds as many calls as their sizes
// allow (256, the entries' ring, of up to 512 bytes; 32 of 4 KiB): 0.27 us
// by hand, 0.57-0.94 in a series where they took 8.1-9.9 before
// (docs/performance.md "Twenty-fifth pass"). 4 KiB: the size up to which
// Open MPI's shared-memory transport sends eagerly.
inline constexpr std::size_t kDataBlockBytes = 512;
inline constexpr std::size_t kDataRingBlocks = 256;
inline constexpr std::size_t kDataRingBytes = kDataRingBlocks * kDataBlockBytes;
inline constexpr std::size_t kDataRingMaxBytes = 4096;
// From one rank's data ring to the next: a cache line more, as from one
// ring of entries to the next.
inline constexpr std::size_t kDataRingStride = kDataRingBytes + kCacheLine;
// The place word (see SlotHeader::size_and_place) of data in the large slot;
// any other value is the index of the data ring's block where it begins
// (one out of range, a broken peer's, reads as the large slot: never
// outside the segment).
inline constexpr std::uint32_t kLargeSlotPlace = UINT32_MAX;

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
  // The segment's bytes before its large slots: header, records, digests,
  // ring entries and data rings, which calls touch every time; attach()
  // maps them all into this process (prefault() in segment.cpp).
  std::span<const std::byte> rings() const noexcept {
    const auto* base = static_cast<const std::byte*>(base_);
    return {base, static_cast<std::size_t>(slots_ - base)};
  }
  // Whether a wait yields the CPU between polls: the ranks are more than
  // the CPUs their affinities allow between them (or see the constructor).
  bool yields_while_waiting() const noexcept { return oversubscribed_; }
  // The communicator rank of the segment's rank `q` (what messages say).
  int comm_rank(int q) const noexcept {
    return members_.empty() ? q : members_[static_cast<std::size_t>(q)];
  }

  SlotHeader& header(int rank, std::uint64_t sequence) const noexcept {
    return *reinterpret_cast<SlotHeader*>(ring_ + static_cast<std::size_t>(rank) * kRingStride +
                                          sequence % kRingDepth * kEntryBytes);
  }
  EntryTail& tail(int rank, std::uint64_t sequence) const noexcept {
    return *reinterpret_cast<EntryTail*>(reinterpret_cast<std::byte*>(&header(rank, sequence)) +
                                         kEntryBytes - sizeof(EntryTail));
  }
  // This rank's signature of call `sequence` (kSignatureBytes; null: none,
  // zeros), written before the call is published. The rest (0 but in the
  // v-forms) is stored only when it changes: a small call then writes
  // nothing in its entry's tail.
  //
  // Its digest goes in this rank's digest word for the call too (written
  // again, the call's signature replaces the one written before).
  void write_signature(std::uint64_t sequence, const void* signature) noexcept {
    static constexpr std::byte kNone[kSignatureBytes] = {};
    const auto* from = signature != nullptr ? static_cast<const std::byte*>(signature) : kNone;
    std::memcpy(header(rank_, sequence).signature, from, kSignatureHeadBytes);
    std::byte* rest = tail(rank_, sequence).signature_rest;
    if (std::memcmp(rest, from + kSignatureHeadBytes, kSignatureRestBytes) != 0)
      std::memcpy(rest, from + kSignatureHeadBytes, kSignatureRestBytes);
    if (sequence != digest_call_) digest_before_ = digest_now_, digest_call_ = sequence;
    digest_now_ = digest_of(digest_before_, from, sequence);
    digest_word(rank_, sequence).store(digest_now_, std::memory_order_relaxed);
  }
  // `rank`'s digest of its signatures of every call up to `sequence`, once
  // it has begun that call (written before it publishes): equal to this
  // rank's when every signature is, and different, but with a chance of
  // 2^-64, when any is not. The call number is in it, so a word of the
  // entry's last call never passes for this one's.
  std::uint64_t digest(int rank, std::uint64_t sequence) const noexcept {
    return digest_word(rank, sequence).load(std::memory_order_relaxed);
  }
  // Whether `rank`'s signature of call `sequence` is `signature`
  // (kSignatureBytes): its rest, one more line to fetch, is compared only
  // where `signature` has one (calls of one kind agree on having one).
  bool signature_is(int rank, std::uint64_t sequence, const void* signature) const noexcept {
    const auto* mine = static_cast<const std::byte*>(signature);
    if (std::memcmp(header(rank, sequence).signature, mine, kSignatureHeadBytes) != 0) return false;
    static constexpr std::byte kNone[kSignatureRestBytes] = {};
    const std::byte* rest = mine + kSignatureHeadBytes;
    return std::memcmp(rest, kNone, kSignatureRestBytes) == 0 ||
           std::memcmp(tail(rank, sequence).signature_rest, rest, kSignatureRestBytes) == 0;
  }
  // `rank`'s whole signature of call `sequence`, into `out` (kSignatureBytes).
  void read_signature(int rank, std::uint64_t sequence, void* out) const noexcept {
    std::memcpy(out, header(rank, sequence).signature, kSignatureHeadBytes);
    std::memcpy(static_cast<std::byte*>(out) + kSignatureHeadBytes,
                tail(rank, sequence).signature_rest, kSignatureRestBytes);
  }
  // Where `rank` wrote (or, for this rank after claim(), writes) the data of
  // call `sequence`: its entry, or where the entry says (its data ring or
  // its large slot); and how many bytes may be there (room()).
  std::byte* data(int rank, std::uint64_t sequence) const noexcept {
    SlotHeader& h = header(rank, sequence);
    if (h.in_entry()) return reinterpret_cast<std::byte*>(&h) + sizeof(SlotHeader);
    const std::uint32_t place = place_word(h);
    if (place < kDataRingBlocks)
      return data_rings_ + static_cast<std::size_t>(rank) * kDataRingStride +
             place * kDataBlockBytes;
    const std::size_t index = static_cast<std::size_t>(rank) * 2 + (sequence & 1);
    return slots_ + index * slot_stride_;
  }
  std::size_t room(int rank, std::uint64_t sequence) const noexcept {
    const SlotHeader& h = header(rank, sequence);
    if (h.in_entry()) return kEntryDataBytes;
    const std::uint32_t place = place_word(h);
    if (place >= kDataRingBlocks) return slot_bytes_;
    return std::min(kDataRingMaxBytes, (kDataRingBlocks - place) * kDataBlockBytes);
  }
  // Asks for the lines of `rank`'s ring entry for call `sequence`, ahead of
  // their use: the header's and, for `bytes` of data that go in the entry,
  // the data's. For writing (this rank's next call: a store to a line a
  // reader still holds waits for it, and so does every store after it, the
  // header's that publishes the call) or for reading (a rooted call's
  // writer runs ahead of its readers). Not a slot's: which one the call
  // takes is not known yet, and a large slot's last user was two calls
  // before, whose readers may still be reading it. A hint only.
  void prefetch(int rank, std::uint64_t sequence, std::size_t bytes, bool for_write) const noexcept {
    const auto* entry = reinterpret_cast<const std::byte*>(&header(rank, sequence));
    const std::size_t end = sizeof(SlotHeader) + (bytes <= kEntryDataBytes ? bytes : 0);
    for (std::size_t at = 0; at < end; at += kCacheLine) {
      if (for_write) prefetch_for_write(entry + at);
      else prefetch_for_read(entry + at);
    }
  }
  // Whether `rank` has begun call `sequence` (its entry for it says so; the
  // entry holds that call or an earlier one, never a later one).
  bool has_begun(int rank, std::uint64_t sequence) const noexcept {
    return header(rank, sequence).sequence.load(std::memory_order_acquire) >= sequence;
  }

  // Before writing this rank's entry for call `sequence`, with `need` bytes
  // of data: waits until every rank has retired call sequence - kRingDepth
  // (the entry's last) and, for data beyond the entry, has begun the call
  // after the last that wrote where it will go (choose_place()). `retire`
  // runs while it waits and this rank's own retired word is the least (so
  // some rank always runs it, and the wait ends): it must move this rank's
  // own retired() on where it can (the calls its successor has begun
  // since). Not otherwise: it looks at the calls its successor is writing,
  // taking their lines from it. Nearly always returns at once. Returns
  // the place it waited for, for claim().
  template <class Poll, class Retire>
  std::uint32_t wait_until_writable(std::uint64_t sequence, std::size_t need,
                                    transport::Deadline deadline, Poll&& poll, Retire&& retire) {
    int behind = 0;
    bool ring_full = false;
    const std::uint32_t place = choose_place(sequence, need);
    const std::uint64_t free_from = free_from_call(place, need, sequence);
    const auto read_floor = [&] {
      std::uint64_t floor = UINT64_MAX;
      for (int q = 0; q < size_; ++q) {
        const std::uint64_t r = retired_word(q).load(std::memory_order_acquire);
        if (r < floor) floor = r, behind = q;
      }
      retired_floor_ = floor;
      ring_full = floor < sequence - kRingDepth;
    };
    auto everyone_is_done = [&] {
      if (sequence > kRingDepth && retired_floor_ < sequence - kRingDepth) {
        read_floor();
        if (ring_full && retired_ == retired_floor_) {
          retire();
          read_floor();
        }
        if (ring_full) return false;
      }
      return everyone_has_begun(free_from, behind);
    };
    wait(everyone_is_done, deadline, poll,
         [&] { return describe_writable_wait(behind, sequence, ring_full, free_from); });
    return place;
  }
  // After wait_until_writable(), with the place it returned: where this
  // rank writes the call's `need` bytes (the entry, its data ring or its
  // large slot; the entry says which).
  std::byte* claim(std::uint64_t sequence, std::size_t need, std::uint32_t place) noexcept {
    SlotHeader& mine = header(rank_, sequence);
    if (place == kInEntry) {
      mine.size_and_place = 0;
    } else {
      mine.size_and_place = SlotHeader::kInSlot;
      place_word(mine) = place;
      if (place != kLargeSlotPlace) {
        const std::size_t end = place + data_ring_blocks(need);
        for (std::size_t b = place; b < end; ++b) block_writer_[b] = sequence;
        data_ring_next_ = end;
      }
    }
    mine.streamed.store(0, std::memory_order_relaxed);  // published by publish()'s store
    // Stored only when it changes: a small call then writes nothing in its tail.
    std::atomic<std::uint64_t>& second = tail(rank_, sequence).second;
    if (second.load(std::memory_order_relaxed) != 0) second.store(0, std::memory_order_relaxed);
    return data(rank_, sequence);
  }
  // The last call up to which this rank compared its successor's signature
  // (and is done with every rank's entries): retire() moves it on.
  std::uint64_t retired() const noexcept { return retired_; }
  void retire(std::uint64_t sequence) noexcept {
    retired_ = sequence;
    retired_word(rank_).store(sequence, std::memory_order_release);
  }
  // Makes this rank's slot for `sequence` visible (signature and data
  // written before) and wakes sleepers.
  void publish(std::uint64_t sequence, std::uint64_t bytes);
  // Sets this rank's streamed word for `sequence` (after publish()) and
  // wakes sleepers: a writer's first `bytes` are written and visible, or a
  // reader has consumed that much of the stream it reads.
  void stream(std::uint64_t sequence, std::size_t bytes);
  // Until `rank`'s streamed word for call `sequence` (whose entry it has
  // published) reaches `bytes`.
  template <class Poll, class What>
  void wait_streamed(int rank, std::uint64_t sequence, std::size_t bytes,
                     transport::Deadline deadline, Poll&& poll, What&& what) {
    const SlotHeader& h = header(rank, sequence);
    wait([&] { return h.streamed.load(std::memory_order_acquire) >= bytes; }, deadline, poll, what);
  }
  // How far `rank`'s stream of call `sequence` has got (its streamed word;
  // read once it has begun the call).
  std::size_t streamed(int rank, std::uint64_t sequence) const noexcept {
    return header(rank, sequence).streamed.load(std::memory_order_acquire);
  }
  // A rank that streams and reads streams in one call: how far it has
  // consumed every other rank's (`second`, once it has begun the call;
  // two-shot AllReduce: the rounds it has reduced), and consume() to move
  // that on (wakes sleepers).
  std::size_t consumed(int rank, std::uint64_t sequence) const noexcept {
    return static_cast<std::size_t>(tail(rank, sequence).second.load(std::memory_order_acquire));
  }
  void consume(std::uint64_t sequence, std::size_t bytes);
  // Marks this rank's second step of call `sequence` done (what it wrote
  // for it is visible); wakes sleepers.
  void publish_second(std::uint64_t sequence);
  bool has_done_second(int rank, std::uint64_t sequence) const noexcept {
    return tail(rank, sequence).second.load(std::memory_order_acquire) >= sequence;
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
          std::size_t length, std::vector<int> members, bool fenceless, bool crowded);
  void wait_slowly(const std::function<bool()>& ready, transport::Deadline deadline,
                   const std::function<void()>& poll, const std::function<std::string()>& what);
  void check_alive() const;
  // Stores `value` into `word` (of this rank's entry, which others may be
  // waiting on) and wakes sleepers, if any.
  template <class T>
  void store_and_wake(std::atomic<T>& word, T value) noexcept;
  std::string describe_writable_wait(int behind, std::uint64_t sequence, bool ring_full,
                                     std::uint64_t free_from) const;
  // The entry's first data word, which says where data not in the entry is
  // (kLargeSlotPlace, or the data ring's block where it begins).
  static std::uint32_t& place_word(const SlotHeader& h) noexcept {
    return *reinterpret_cast<std::uint32_t*>(
        reinterpret_cast<std::byte*>(const_cast<SlotHeader*>(&h)) + sizeof(SlotHeader));
  }
  // Where this rank's call `sequence` with `need` bytes of data goes: its
  // entry (kInEntry), its large slot (kLargeSlotPlace), or the first of the
  // data ring's blocks it takes. Data up to kDataRingMaxBytes goes in the
  // large slot where that is free now (every rank has begun the call
  // before), as in the calls every rank waits for (AllReduce, allgather),
  // and in the data ring where it would have to wait (a rooted call's
  // writer ahead of its readers) and the wait would cost a switch of core
  // (the ranks are more than their CPUs: yields_while_waiting()). The data
  // ring for all of them made 0.5-4 KiB AllReduce and allgather at p = 2
  // 1.1-1.2x slower (docs/performance.md "Twenty-fifth pass"; taking its
  // first blocks again wherever free, so that two places alternate as the
  // large slots do, did not help; the cause was not found), and for rooted
  // calls at p = 2 on 2 cores, where a wait is a short spin, 1 KiB
  // broadcasts and reduces 1.1-1.2x faster but nonblocking broadcasts and
  // scatters 1.1-1.2x slower.
  static constexpr std::uint32_t kInEntry = UINT32_MAX - 1;
  static std::size_t data_ring_blocks(std::size_t need) noexcept {
    return (need + kDataBlockBytes - 1) / kDataBlockBytes;
  }
  std::uint32_t choose_place(std::uint64_t sequence, std::size_t need) {
    if (need <= kEntryDataBytes) return kInEntry;
    int behind = 0;
    if (need > kDataRingMaxBytes || !oversubscribed_ || everyone_has_begun(sequence - 1, behind))
      return kLargeSlotPlace;
    const bool fits = data_ring_next_ + data_ring_blocks(need) <= kDataRingBlocks;
    return static_cast<std::uint32_t>(fits ? data_ring_next_ : 0);
  }
  // Whether every other rank has begun `call` (0: none to wait for); else
  // `behind` is one that has not.
  bool everyone_has_begun(std::uint64_t call, int& behind) noexcept {
    if (call <= begun_floor_) return true;
    for (behind = 0; behind < size_; ++behind)
      if (behind != rank_ && !has_begun(behind, call)) return false;
    begun_floor_ = call;
    return true;
  }
  // The call every other rank must have begun before this rank's call
  // `sequence` writes `need` bytes at `place` (0: none): the one after the
  // last call that wrote there.
  std::uint64_t free_from_call(std::uint32_t place, std::size_t need,
                               std::uint64_t sequence) const noexcept {
    if (place == kInEntry) return 0;
    if (place == kLargeSlotPlace) return sequence - 1;
    std::uint64_t last = 0;
    for (std::size_t b = place; b < place + data_ring_blocks(need); ++b)
      last = std::max(last, block_writer_[b]);
    return last == 0 ? 0 : last + 1;
  }
  std::atomic<std::uint64_t>& retired_word(int rank) const noexcept;
  std::atomic<std::uint64_t>& digest_word(int rank, std::uint64_t sequence) const noexcept {
    return digests_[static_cast<std::size_t>(rank) * (kDigestStride / 8) + sequence % kRingDepth];
  }
  // The digest of call `sequence` of signature (kSignatureBytes) after
  // those whose digest is `before`: a multiply-xorshift mix of the two, the
  // signature's three words and the call number.
  static std::uint64_t digest_of(std::uint64_t before, const std::byte* signature,
                                 std::uint64_t sequence) noexcept {
    std::uint64_t words[kSignatureBytes / 8];
    std::memcpy(words, signature, sizeof words);
    std::uint64_t h = (before ^ sequence) * 0x9e3779b97f4a7c15ull;
    for (const std::uint64_t w : words) {
      h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
      h ^= h >> 31;
    }
    return h;
  }

  static constexpr int kFastSpins = 64;
  const int rank_, size_;
  const std::size_t slot_bytes_;
  const std::string name_;
  void* const base_;
  const std::size_t length_;
  std::atomic<std::uint64_t>* const digests_;  // rank 0's first digest word
  std::byte* const ring_;           // rank 0's first ring entry
  std::byte* const data_rings_;     // rank 0's data ring
  std::byte* const slots_;          // rank 0's first large slot
  const std::size_t slot_stride_;  // from one large slot to the next
  // This rank's data ring: the call that last wrote each block (0: none
  // yet), and the block after the last call's data there (where the next
  // call's begins, or at 0 where it would not fit before the end).
  std::uint64_t block_writer_[kDataRingBlocks] = {};
  std::size_t data_ring_next_ = 0;
  // A call every rank is known to have begun (everyone_has_begun()).
  std::uint64_t begun_floor_ = 0;
  std::uint64_t retired_ = 0;       // this rank's retired word, as last written
  std::uint64_t retired_floor_ = 0;  // the least retired word of any rank, as last read
  // This rank's digests (digest()): of the calls before digest_call_, and of
  // those and digest_call_'s signature as last written.
  std::uint64_t digest_before_ = 0, digest_now_ = 0, digest_call_ = 0;
  // More ranks than the CPUs their affinities allow between them (or see
  // the constructor): waits yield.
  bool oversubscribed_ = false;
  // Every rank is registered for membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED):
  // publishes need no fence, sleepers issue the barrier (store_and_wake()).
  bool fenceless_ = false;
  const std::vector<int> members_;  // see attach()
};

// The bytes of a segment for `size` ranks and `slot_bytes` per slot.
std::size_t segment_bytes(int size, std::size_t slot_bytes) noexcept;

// Removes "/dev/shm/chorus.<pid>.*" segments whose creating process is gone;
// returns how many. (Creators call it; a test too.)
int remove_stale_segments();

}  // namespace chorus::shm
