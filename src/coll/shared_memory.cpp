#include "coll/shared_memory.hpp"

#include "coll/patterns/chunks.hpp"
#include "coll/registry.hpp"
#include "coll/topology.hpp"
#include "common/copy.hpp"
#include "reduce/reduce.hpp"
#include "shm/segment.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstddef>
#include <cstring>
#include <type_traits>

namespace chorus::coll {
namespace {

// An entry holds a signature as its header's part and the rest (the
// layout hash) in its tail: see Segment::signature_is().
static_assert(std::is_trivially_copyable_v<CallSignature> &&
              sizeof(CallSignature) == shm::kSignatureBytes &&
              offsetof(CallSignature, layout) == shm::kSignatureHeadBytes);

// What a wait on the segment runs while it sleeps: the abort flag.
auto abort_poll(const Collective& c) {
  return [flag = c.abort_requested] {
    if (flag != nullptr && flag->load(std::memory_order_relaxed))
      throw Error(ErrorCode::aborted, "the communicator was aborted");
  };
}

// `rank`'s signature of call `sequence`.
CallSignature signature_in(const shm::Segment& host, int rank, std::uint64_t sequence) {
  CallSignature s;
  host.read_signature(rank, sequence, &s);
  return s;
}
// The same for a check that collects every rank's: `mine` where they agree
// (compared in place), else read whole.
CallSignature signature_in(const shm::Segment& host, int rank, std::uint64_t sequence,
                           const CallSignature& mine) {
  return host.signature_is(rank, sequence, &mine) ? mine : signature_in(host, rank, sequence);
}

// Until `rank`'s slot holds call c.sequence; then its header. A slot that
// holds a later call is a peer that broke the protocol (or another job's
// bytes): an error, never a wrong read.
//
// `data_bytes`: the data expected in the entry after the header. What does
// not share the header's line is fetched every few polls while waiting: the
// writer writes it before the header, so the lines are often current by
// the time the header says so, where fetching them only then costs a
// second transfer after the first (p = 2, 32-192 bytes: 0.88-0.97x the
// time, docs/performance.md "Sixth pass").
const shm::SlotHeader& wait_for_slot(const Collective& c, int rank, std::size_t data_bytes = 0) {
  shm::Segment& host = *c.host;
  const shm::SlotHeader& header = host.header(rank, c.sequence);
  const std::size_t end =
      data_bytes <= shm::kEntryDataBytes ? sizeof(shm::SlotHeader) + data_bytes : 0;
  unsigned polls = 0;
  const auto begun = [&] {
    if (host.has_begun(rank, c.sequence)) return true;
    if (end > shm::kCacheLine && polls++ % 8 == 0)
      for (std::size_t at = shm::kCacheLine; at < end; at += shm::kCacheLine)
        shm::prefetch_for_read(reinterpret_cast<const std::byte*>(&header) + at);
    return false;
  };
  host.wait(begun, c.deadline, abort_poll(c), [&] {
    return fmt::format("rank {} to begin call #{} (its shared-memory slot)", host.comm_rank(rank),
                       c.sequence);
  });
  const std::uint64_t there = header.sequence.load(std::memory_order_acquire);
  if (there != c.sequence)  // later than this call: not what any rank of this job writes
    throw Error(ErrorCode::peer_failure,
                fmt::format("rank {}: rank {}'s shared-memory slot holds call #{} during call "
                            "#{}: a broken peer or a foreign segment",
                            host.comm_rank(host.rank()), host.comm_rank(rank), there, c.sequence));
  return header;
}

// Compares this rank's signature of each call after its retired one with
// its successor's, as far as the successor has begun them, and moves
// retired on (shm/segment.hpp). Every pair of neighbours agreeing means
// every rank agrees: the calls whose algorithm reads no peer's slot (a
// broadcast's root, a reduce's other ranks) are checked so, up to
// kRingDepth calls late. A mismatch names both calls, as the other checks do.
//
// Compared by their digests (shm/segment.hpp), which cover every call up to
// theirs: the last call's alone, where they agree. Else call by call, up to
// the first whose digests differ: then its entries tell whether the
// successor has begun it, and if so, its signature that differs. Up to
// call `last` (before c's: every read of those is done).
void retire_compared_calls(const Collective& c, std::uint64_t last) {
  shm::Segment& host = *c.host;
  const int p = host.size(), me = host.rank(), next = (me + 1) % p;
  std::uint64_t done = host.retired();
  if (done >= last) return;
  // Neither rank's entry or digest of a call after done can be rewritten
  // yet: that waits for this rank's retired.
  if (host.digest(next, last) == host.digest(me, last)) {
    host.retire(last);
    return;
  }
  for (; done < last; ++done) {
    const std::uint64_t call = done + 1;
    if (host.digest(next, call) == host.digest(me, call)) continue;
    if (!host.has_begun(next, call)) break;
    const CallSignature mine = signature_in(host, me, call);
    const CallSignature theirs = signature_in(host, next, call);
    auto seen = SignatureExtremes::of(mine, host.comm_rank(me));
    seen.add(theirs, host.comm_rank(next));
    // Every call before agrees: their signatures differ, or (a chance of
    // 2^-64) their digests do not tell.
    if (!seen.agree()) throw mismatch_error(call, seen, algorithm_name);
  }
  if (done != host.retired()) host.retire(done);
}

// This rank's slot for the call, once it may be written, for `need` bytes
// (the signature is written now; the data is the caller's to copy before
// publishing).
std::byte* begin_slot(const Collective& c, std::size_t need) {
  shm::Segment& host = *c.host;
  // Compared in batches: every kCompareEvery calls once retired is half the
  // ring behind, and only up to kCompareMargin calls before this one, so
  // that the line of digests the successor is writing now stays with it.
  // Comparing every call's signature up to the one before (reading the
  // successor's entry, as the successor wrote it: a reduce's other ranks
  // keep pace with the root and read none of its lines in the call) made an
  // 8-byte reduce at p = 2 0.80x of Open MPI's time, 0.97x now
  // (docs/performance.md "Fourteenth pass").
  constexpr std::uint64_t kCompareEvery = 16, kCompareMargin = 16;
  if (host.retired() + shm::kRingDepth / 2 < c.sequence && c.sequence % kCompareEvery == 0)
    retire_compared_calls(c, c.sequence - 1 - kCompareMargin);
  const std::uint32_t place =
      host.wait_until_writable(c.sequence, need, c.deadline, abort_poll(c),
                               [&] { retire_compared_calls(c, c.sequence - 1); });
  host.write_signature(c.sequence, c.signature);
  return host.claim(c.sequence, need, place);
}

// Reads every rank's signature (waiting for those not there yet) and
// throws the mismatch when they differ; the smallest and the largest are
// named, the lowest rank on ties, so that every rank says the same.
void check_every_signature(const Collective& c) {
  if (c.signature == nullptr) return;
  const shm::Segment& host = *c.host;
  auto seen = SignatureExtremes::of(*c.signature, host.comm_rank(host.rank()));
  for (int q = 0; q < host.size(); ++q) {
    wait_for_slot(c, q);
    seen.add(signature_in(host, q, c.sequence), host.comm_rank(q));
  }
  if (!seen.agree()) throw mismatch_error(c.sequence, seen, algorithm_name);
}

// `rank`'s slot once it holds this call, its signature compared with this
// rank's (one that differs ends the call with the mismatch named).
// `data_bytes`: as wait_for_slot()'s.
const shm::SlotHeader& wait_for_call(const Collective& c, int rank, std::size_t data_bytes = 0) {
  const shm::SlotHeader& header = wait_for_slot(c, rank, data_bytes);
  if (c.signature != nullptr && !c.host->signature_is(rank, c.sequence, c.signature))
    check_every_signature(c);
  return header;
}

// `rank`'s data for this call, which must be `bytes` long. A signature that
// differs (or, with the check off, a size that does) ends the call with
// the mismatch named.
const std::byte* wait_for_data(const Collective& c, int rank, std::size_t bytes) {
  const shm::SlotHeader& header = wait_for_call(c, rank, rank == c.host->rank() ? 0 : bytes);
  if (header.bytes() != bytes)
    throw Error(ErrorCode::mismatched_collective,
                fmt::format("rank {}: rank {} wrote {} bytes into its shared-memory slot for call "
                            "#{}, this rank expected {} (the ranks made different calls)",
                            c.host->comm_rank(c.host->rank()), c.host->comm_rank(rank),
                            header.bytes(), c.sequence, bytes));
  return c.host->data(rank, c.sequence);
}

// A rooted call's writers (`rank`, or every rank but this one) run ahead
// of their readers: their entries of the calls after this one are likely
// written already, and fetching them now overlaps this call. (Not for the
// calls where every rank waits for every other: there the fetch would
// only take a line its writer is about to write.)
void fetch_ahead(const Collective& c, int rank, std::size_t data_bytes) {
  c.host->prefetch(rank, c.sequence + 2, data_bytes, false);
}
void fetch_ahead_from_all(const Collective& c, std::size_t data_bytes) {
  for (int q = 0; q < c.host->size(); ++q)
    if (q != c.host->rank()) fetch_ahead(c, q, data_bytes);
}

// Large data streams: its writer publishes the slot first, then the data
// chunk by chunk (Segment::stream()), and a reader that works on each chunk
// as it lands (a broadcast's others, a reduce's root) overlaps the writer's
// copy in. At p = 2, 1 MiB, the copy in and the reduce one after the other
// took 164 us (Open MPI 120). Data larger than a slot goes through it as
// through a ring buffer: its readers say how far they have consumed it
// (the streamed word of their own entry), and the writer overwrites only
// what every reader has consumed.
constexpr std::size_t kStreamChunkBytes = 64 << 10;
// The most a call streams: its size must fit the entry's 31-bit size word.
constexpr std::size_t kMaxStreamedBytes = (std::size_t{1} << 31) - 1;
bool streams(std::size_t bytes) { return bytes > kStreamChunkBytes; }

// The part of the slot a streamed call of `bytes` goes through: all of it
// when it fits, else as many whole units (chunks, or rounds) as the slot holds.
std::size_t stream_window(const Collective& c, std::size_t bytes,
                          std::size_t unit = kStreamChunkBytes) {
  const std::size_t slot = c.host->slot_bytes();
  return bytes <= slot ? bytes : slot / unit * unit;
}

void wait_streamed(const Collective& c, int rank, std::size_t bytes) {
  c.host->wait_streamed(rank, c.sequence, bytes, c.deadline, abort_poll(c), [&] {
    return fmt::format("rank {} to reach byte {} of call #{}'s shared-memory stream (written, "
                       "or consumed by a reader)",
                       c.host->comm_rank(rank), bytes, c.sequence);
  });
}

// Copies `bytes` from `source` into this rank's slot and publishes it.
void contribute(const Collective& c, const void* source, std::size_t bytes) {
  std::byte* slot = begin_slot(c, bytes);
  copy_memory(slot, source, bytes);
  c.host->publish(c.sequence, bytes);
}

// The same, streaming large data: for the writers whose readers wait for
// each chunk (wait_streamed()), which are `readers` (this rank excluded).
// Beyond the window it waits, before it overwrites a chunk, until every
// reader has consumed it (a reader that made another call is named).
template <class Readers>
void contribute_streaming(const Collective& c, const void* source, std::size_t bytes,
                          Readers&& readers) {
  if (!streams(bytes)) return contribute(c, source, bytes);
  const std::size_t window = stream_window(c, bytes);
  std::byte* slot = begin_slot(c, window);
  c.host->publish(c.sequence, bytes);
  bool readers_checked = false;
  for (std::size_t at = 0; at < bytes; at += kStreamChunkBytes) {
    const std::size_t n = std::min(kStreamChunkBytes, bytes - at);
    if (at + n > window) {
      readers([&](int q) {
        if (!readers_checked) wait_for_call(c, q);
        wait_streamed(c, q, at + n - window);
      });
      readers_checked = true;
    }
    copy_memory(slot + at % window, static_cast<const std::byte*>(source) + at, n);
    c.host->stream(c.sequence, at + n);
  }
}

std::size_t bytes_of(std::size_t count, DataType type) { return count * size_of(type); }

// recv = slot 0 op slot 1 op ... in rank order, every rank alike, from
// `offset` in each slot. `own`: this rank's data (the `count` elements
// themselves), read in its turn from there instead of from its slot:
// where it is not in the slot (a reduce's root), or where the peers are
// reading the slot (one-shot AllReduce). It may be recv itself (in place):
// on a rank above 1, whose recv is its input until its turn, the ranks
// before it are summed in scratch (private memory: stores into a slot,
// whose lines the other ranks read, cost more, docs/performance.md
// "Eighteenth pass").
void reduce_slots(const Collective& c, void* recv, std::size_t offset, std::size_t count,
                  std::size_t slot_bytes, DataType type, ReduceOp op,
                  const void* own = nullptr) {
  const int p = c.host->size(), me = c.host->rank();
  const std::size_t bytes = bytes_of(count, type);
  const auto data = [&](int q) -> const std::byte* {
    if (own != nullptr && q == me) return static_cast<const std::byte*>(own);
    return wait_for_data(c, q, slot_bytes) + offset;
  };
  const std::byte* first = data(0);
  if (p == 1) {
    if (bytes > 0 && first != recv) std::memmove(recv, first, bytes);
  } else {
    constexpr unsigned kPrefixScratch = 1;
    const bool own_is_recv = own == recv && me >= 2;
    void* sum = own_is_recv ? c.scratch_buffer(kPrefixScratch, bytes) : recv;
    reduce::reduce(sum, first, data(1), count, type, op);
    for (int q = 2; q < p; ++q) {
      if (own_is_recv && q == me) {
        reduce::reduce(recv, sum, own, count, type, op);
        sum = recv;
      } else {
        reduce::reduce(sum, data(q), count, type, op);
      }
    }
  }
  if (op == ReduceOp::avg && count > 0)
    reduce::divide(recv, count, type, static_cast<std::size_t>(p));
}

}  // namespace

HostCallCheck::HostCallCheck(const Collective& collective, const CallSignature& mine,
                             std::string_view (*name_algorithm)(std::uint8_t))
    : collective_(collective), name_algorithm_(name_algorithm), mine_(mine),
      extremes_(SignatureExtremes::of(mine, collective.host->rank())) {
  shm::Segment& host = *collective.host;
  begin_slot(collective, 0);
  host.write_signature(collective.sequence, &mine);
  host.publish(collective.sequence, 0);
}

void HostCallCheck::poll() {
  shm::Segment& host = *collective_.host;
  const int p = host.size();
  while (seen_ < p && host.has_begun(seen_, collective_.sequence)) {
    wait_for_slot(collective_, seen_);
    extremes_.add(signature_in(host, seen_, collective_.sequence, mine_), seen_);
    ++seen_;
  }
  if (seen_ == p && !extremes_.agree())
    throw mismatch_error(collective_.sequence, extremes_, name_algorithm_);
  host.throw_if_aborted();
}

void HostCallCheck::finish(transport::Deadline deadline) {
  shm::Segment& host = *collective_.host;
  while (!finished()) {
    host.wait([&] { return host.has_begun(seen_, collective_.sequence); }, deadline,
              abort_poll(collective_),
              [&] { return fmt::format("rank {} to begin call #{}", seen_, collective_.sequence); });
    poll();
  }
  poll();  // the verdict, when every signature was already read
}

void announce_call(const Collective& c) { contribute(c, nullptr, 0); }

// Every rank reads its own input from where it is, not from its slot: the
// slot's lines are the ones every peer is fetching at that moment, and
// reading them back made p = 2 at 8 B-8 KiB 1.1-1.6x as slow, and forced
// at 16-64 KiB 2-2.6x (docs/performance.md "Twentieth pass").
void shm_one_shot_allreduce(const Collective& c, const Operands& o) {
  const std::size_t bytes = bytes_of(o.count, o.type);
  contribute(c, o.send, bytes);  // before recv is written: they may be one buffer
  reduce_slots(c, o.recv, 0, o.count, bytes, o.type, o.op, o.send);
}

std::size_t shm_streamed_need(std::size_t bytes, int) {
  return streams(bytes) && bytes <= kMaxStreamedBytes ? kStreamChunkBytes : bytes;
}

// Where the hierarchical AllReduce's leader writes its result in its slot: after its input.
std::size_t reduced_offset(std::size_t bytes) { return (bytes + 63) / 64 * 64; }

// Two-shot goes in rounds through a window of its slot: round k takes piece
// k of every chunk (at most kTwoShotPieceBytes of each). A round's place in
// a slot holds its rank's input pieces of the other ranks' chunks and its
// reduced piece of its own chunk; the slot holds `window` rounds at once,
// at least two: a rank writes round k only once every other has reduced
// round k - window + 1 (so copied round k - window out), which needs only
// rounds this rank has written. So any size goes through a slot of a few
// pieces, and a round's copies and reduce stay in cache: at p = 2, 32 MiB,
// 6.4-7.5 ms where the ring took 12.2-13.7, at p = 4 16.0-17.5 against
// 33.6 (docs/performance.md "Eighth pass").
constexpr std::size_t kTwoShotPieceBytes = 256 << 10;
// The least piece the slot must hold two rounds of (shm_two_shot_need()).
constexpr std::size_t kTwoShotLeastPieceBytes = 4 << 10;

struct TwoShotRounds {
  std::size_t piece;   // elements of each chunk per round
  std::size_t stride;  // bytes from one place to the next in a round's
  std::size_t places;  // per round: p input pieces (its rank's own unused), then the reduced one
  std::size_t rounds;
  std::size_t window;  // rounds a slot holds
  std::size_t round_bytes() const { return stride * places; }
};

// Pieces as large as kTwoShotPieceBytes and two rounds in the slot allow.
TwoShotRounds two_shot_rounds(std::size_t count, std::size_t esize, int p, std::size_t slot) {
  const auto ranks = static_cast<std::size_t>(p);
  const std::size_t places = ranks + 1, chunk = (count + ranks - 1) / ranks;
  const std::size_t most = std::min(kTwoShotPieceBytes, slot / (2 * places) / 64 * 64);
  const std::size_t piece = std::max<std::size_t>(1, std::min(chunk, most / esize));
  const std::size_t stride = (piece * esize + 63) / 64 * 64;
  const std::size_t rounds = std::max<std::size_t>(1, (chunk + piece - 1) / piece);
  return {piece, stride, places, rounds, std::min(rounds, slot / (stride * places))};
}

// Two rounds' places (two_shot_rounds() takes pieces of at most half the
// slot's share): for one piece the chunk (an element more than bytes / p
// at most), else the least piece.
std::size_t shm_two_shot_need(std::size_t bytes, int p) {
  if (bytes > kMaxStreamedBytes) return bytes;  // the header's size word
  const std::size_t places = static_cast<std::size_t>(p) + 1;
  const std::size_t chunk = (bytes / static_cast<std::size_t>(p) + 64 + 63) / 64 * 64;
  return 2 * places * std::min(chunk, kTwoShotLeastPieceBytes);
}

void shm_two_shot_allreduce(const Collective& c, const Operands& o) {
  shm::Segment& host = *c.host;
  const int p = host.size(), r = host.rank();
  const std::size_t esize = size_of(o.type), bytes = o.count * esize;
  const NearEqualChunks chunks{o.count, static_cast<std::size_t>(p)};
  const TwoShotRounds plan = two_shot_rounds(o.count, esize, p, host.slot_bytes());
  // Chunk q's piece of round k: its first element in the buffer, and how many.
  const auto piece_first = [&](int q, std::size_t k) {
    const auto j = static_cast<std::size_t>(q);
    return chunks.offset(j) + std::min(chunks.size(j), k * plan.piece);
  };
  const auto piece_length = [&](int q, std::size_t k) {
    const std::size_t size = chunks.size(static_cast<std::size_t>(q));
    return std::min(plan.piece, size - std::min(size, k * plan.piece));
  };
  // Where round k's place for chunk q's piece is in a slot (q = p: the reduced one).
  const auto place = [&](std::size_t k, int q) {
    return k % plan.window * plan.round_bytes() + static_cast<std::size_t>(q) * plan.stride;
  };
  const auto wait_rounds = [&](int q, std::size_t rounds, bool reduced) {
    host.wait(
        [&] {
          return (reduced ? host.consumed(q, c.sequence) : host.streamed(q, c.sequence)) >= rounds;
        },
        c.deadline, abort_poll(c), [&] {
          return fmt::format("rank {} to {} round {} of {} of call #{} (two-shot)", host.comm_rank(q),
                             reduced ? "reduce" : "write", rounds, plan.rounds, c.sequence);
        });
  };
  const auto* in = static_cast<const std::byte*>(o.send);
  auto* out = static_cast<std::byte*>(o.recv);
  std::byte* slot = begin_slot(c, plan.window * plan.round_bytes());
  // Every piece but this rank's own goes into the slot; its own only this
  // rank reads, from where it is (at p = 2 the copy in is half the buffer).
  const auto write_round = [&](std::size_t k) {
    for (int q = 0; q < p; ++q)
      if (q != r)
        copy_memory(slot + place(k, q), in + piece_first(q, k) * esize, piece_length(q, k) * esize);
    host.stream(c.sequence, k + 1);  // the rounds written
  };
  // Round k's piece of this rank's own chunk, reduced in rank order straight
  // into its place in the output, then copied from there (in cache) into
  // the slot's reduced place for the others. Reducing into the slot and
  // copying it out as the other ranks' pieces took 1.4-1.9x the time at p
  // = 2, 256 KiB-64 MiB (docs/performance.md "Eighteenth pass").
  const auto reduce_own_piece = [&](std::size_t k) {
    const std::size_t n = piece_length(r, k);
    std::byte* mine = out + piece_first(r, k) * esize;
    reduce_slots(c, mine, place(k, r), n, bytes, o.type, o.op, in + piece_first(r, k) * esize);
    copy_memory(slot + place(k, p), mine, n * esize);
  };
  // Round 0 is written before the slot is published: a call of one round
  // has one wait per step, as before rounds (four ranks on two cores, 256
  // KiB: 1.16x the time with a second).
  write_round(0);
  host.publish(c.sequence, bytes);
  // The counters below are read only once every slot holds this call (an
  // entry's words belong to the call before until then; the signatures and
  // sizes compared: a rank that made another call writes no round).
  for (int q = 0; q < p; ++q)
    if (q != r) wait_for_data(c, q, bytes);
  for (std::size_t k = 0; k < plan.rounds; ++k) {
    // Round k's place last held round k - window: every other rank must be
    // past it (it has reduced the round after, so it copied that one out).
    if (k >= plan.window)
      for (int q = 0; q < p; ++q)
        if (q != r) wait_rounds(q, k - plan.window + 2, true);
    if (k > 0) write_round(k);
    for (int q = 0; q < p; ++q)
      if (q != r) wait_rounds(q, k + 1, false);
    reduce_own_piece(k);
    host.consume(c.sequence, k + 1);  // the rounds reduced
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      wait_rounds(q, k + 1, true);
      copy_memory(out + piece_first(q, k) * esize, host.data(q, c.sequence) + place(k, p),
                  piece_length(q, k) * esize);
    }
  }
}

void shm_reduce(const Collective& c, const Operands& o) {
  const std::size_t bytes = bytes_of(o.count, o.type);
  const int me = c.host->rank();
  if (me != o.root) {
    contribute_streaming(c, o.send, bytes, [&](auto&& each) { each(o.root); });
    // The root compares this call's signature as it reads the slot; this
    // rank returns at once (and compares later, retire_compared_calls()).
    return;
  }
  // Nobody else reads the root's input: it reduces it from where it is
  // instead of copying it into its slot first (one copy of the buffer less
  // on the root, which every other rank waits for), in place too
  // (reduce_slots()).
  fetch_ahead_from_all(c, bytes);
  if (!streams(bytes)) {
    contribute(c, nullptr, 0);
    reduce_slots(c, o.recv, 0, o.count, bytes, o.type, o.op, o.send);
    return;
  }
  contribute(c, nullptr, 0);
  // Chunk by chunk as the others stream them in, once every slot says it
  // holds this call (the signatures and sizes compared: a rank that made
  // another call streams nothing).
  for (int q = 0; q < c.host->size(); ++q)
    if (q != me) wait_for_data(c, q, bytes);
  const std::size_t window = stream_window(c, bytes), esize = size_of(o.type);
  const bool wraps = window < bytes;
  for (std::size_t at = 0; at < bytes; at += kStreamChunkBytes) {
    const std::size_t n = std::min(kStreamChunkBytes, bytes - at);
    for (int q = 0; q < c.host->size(); ++q)
      if (q != me) wait_streamed(c, q, at + n);
    reduce_slots(c, static_cast<std::byte*>(o.recv) + at, at % window, n / esize, bytes, o.type,
                 o.op, static_cast<const std::byte*>(o.send) + at);
    if (wraps) c.host->stream(c.sequence, at + n);  // consumed: the writers may reuse it
  }
}

void shm_broadcast(const Collective& c, const Operands& o) {
  const std::size_t bytes = bytes_of(o.count, o.type);
  // The others compare the root's signature as they read its slot; the
  // root returns at once (retire_compared_calls() compares it later).
  if (c.host->rank() == o.root) {
    return contribute_streaming(c, o.recv, bytes, [&](auto&& each) {
      for (int q = 0; q < c.host->size(); ++q)
        if (q != o.root) each(q);
    });
  }
  contribute(c, nullptr, 0);
  fetch_ahead(c, o.root, bytes);
  const std::byte* from = wait_for_data(c, o.root, bytes);
  if (!streams(bytes)) return copy_memory(o.recv, from, bytes);
  const std::size_t window = stream_window(c, bytes);
  for (std::size_t at = 0; at < bytes; at += kStreamChunkBytes) {  // as the root streams them in
    const std::size_t n = std::min(kStreamChunkBytes, bytes - at);
    wait_streamed(c, o.root, at + n);
    copy_memory(static_cast<std::byte*>(o.recv) + at, from + at % window, n);
    if (window < bytes) c.host->stream(c.sequence, at + n);  // consumed: the root may reuse it
  }
}

// A call in which every rank streams and reads streams (a large allgather
// or alltoall), in rounds: each rank streams its round i (`write_round`
// fills round_bytes at the given place of its window) and, in the same
// loop, once every other rank has streamed round i, copies their round i
// out (`read_round`, given where each rank's round i is). Its
// `second` word says how many rounds' bytes it has consumed: a writer
// overwrites a round of a window smaller than its stream only once every
// reader is past it. Every rank q publishes total(q) (the sizes compared).
// Two copies in user space per byte, where the message algorithms' cross-
// memory attach makes one in the kernel, page by page, 3-4x slower per byte
// here.
template <class Total, class WriteRound, class ReadRound>
void exchange_streaming(const Collective& c, Total&& total, std::size_t rounds,
                        std::size_t round_bytes, WriteRound&& write_round, ReadRound&& read_round) {
  shm::Segment& host = *c.host;
  const int p = host.size(), me = host.rank();
  const std::size_t window = stream_window(c, rounds * round_bytes, round_bytes);
  std::byte* slot = begin_slot(c, window);
  host.publish(c.sequence, total(me));
  for (int q = 0; q < p; ++q)  // every signature and size compared
    if (q != me) wait_for_data(c, q, total(q));
  std::size_t written = 0, consumed = 0;  // rounds
  // The first rank that holds up this rank's next write or read, or -1.
  const auto write_waits_for = [&] {
    const std::size_t end = (written + 1) * round_bytes;
    if (end <= window) return -1;
    for (int q = 0; q < p; ++q)
      if (q != me && host.consumed(q, c.sequence) < end - window) return q;
    return -1;
  };
  const auto read_waits_for = [&] {
    const std::size_t end = (consumed + 1) * round_bytes;
    for (int q = 0; q < p; ++q)
      if (q != me && host.streamed(q, c.sequence) < end) return q;
    return -1;
  };
  while (written < rounds || consumed < rounds) {
    bool moved = false;
    if (written < rounds && write_waits_for() < 0) {
      write_round(written, slot + written * round_bytes % window);
      ++written;
      host.stream(c.sequence, written * round_bytes);
      moved = true;
    }
    if (consumed < rounds && read_waits_for() < 0) {
      read_round(consumed, [&](int q) { return host.data(q, c.sequence) + consumed * round_bytes % window; });
      ++consumed;
      host.consume(c.sequence, consumed * round_bytes);
      moved = true;
    }
    if (moved) continue;
    host.wait(
        [&] {
          return (written < rounds && write_waits_for() < 0) ||
                 (consumed < rounds && read_waits_for() < 0);
        },
        c.deadline, abort_poll(c), [&] {
          const int writer = read_waits_for(), reader = write_waits_for();
          return consumed < rounds && writer >= 0
                     ? fmt::format("rank {} to stream round {} of call #{} (shared memory)",
                                   host.comm_rank(writer), consumed, c.sequence)
                     : fmt::format("rank {} to consume round {} of this rank's stream of call #{} "
                                   "(shared memory)", host.comm_rank(std::max(reader, 0)),
                                   written - window / round_bytes, c.sequence);
        });
  }
}

// The bytes of round i of a block cut into chunks of `chunk`.
std::size_t chunk_length(std::size_t block, std::size_t chunk, std::size_t i) {
  return std::min(chunk, block - i * chunk);
}
std::size_t chunks_of(std::size_t block, std::size_t chunk) { return (block + chunk - 1) / chunk; }

// Allgather: round i is chunk i of this rank's block.
void shm_allgather_streaming(const Collective& c, const Operands& o, std::size_t block) {
  const int p = c.host->size(), me = c.host->rank();
  const auto* in = static_cast<const std::byte*>(o.send);
  auto* out = static_cast<std::byte*>(o.recv);
  const std::byte* own_place = out + static_cast<std::size_t>(me) * block;
  const std::size_t chunk = kStreamChunkBytes;
  exchange_streaming(
      c, [&](int) { return block; }, chunks_of(block, chunk), chunk,
      [&](std::size_t i, std::byte* at) { copy_memory(at, in + i * chunk, chunk_length(block, chunk, i)); },
      [&](std::size_t i, auto&& round_of) {
        const std::size_t n = chunk_length(block, chunk, i);
        for (int q = 0; q < p; ++q) {
          std::byte* to = out + static_cast<std::size_t>(q) * block + i * chunk;
          if (q != me) copy_memory(to, round_of(q), n);
          else if (in != own_place) copy_memory(to, in + i * chunk, n);
        }
      });
}

void shm_allgather(const Collective& c, const Operands& o) {
  const std::size_t block = bytes_of(o.count, o.type);
  if (streams(block)) return shm_allgather_streaming(c, o, block);
  contribute(c, o.send, block);
  auto* out = static_cast<std::byte*>(o.recv);
  for (int q = 0; q < c.host->size(); ++q)
    copy_memory(out + static_cast<std::size_t>(q) * block, wait_for_data(c, q, block), block);
}

// Every rank knows every block's size, so all take the same path: while
// the largest block is at most a chunk, every block through its rank's
// slot; beyond, all stream through their slots in rounds of a chunk of
// every block (a block shorter than the largest streams nothing in its
// last rounds).
void shm_allgatherv(const Collective& c, const Operands& o) {
  const int p = c.host->size(), me = c.host->rank();
  const BlockLayout& blocks = o.recv_blocks();
  const std::size_t esize = size_of(o.type);
  std::size_t largest = 0;
  for (int q = 0; q < p; ++q) largest = std::max(largest, blocks.bytes(q, esize));
  const auto* in = static_cast<const std::byte*>(o.send);
  auto* out = static_cast<std::byte*>(o.recv);
  const std::size_t mine = blocks.bytes(me, esize);
  const bool in_place = in == out + blocks.offset(me, esize);
  if (!streams(largest)) {
    contribute(c, in, mine);
    for (int q = 0; q < p; ++q) {
      const std::byte* from = wait_for_data(c, q, blocks.bytes(q, esize));
      if (q != me) copy_memory(out + blocks.offset(q, esize), from, blocks.bytes(q, esize));
    }
    if (!in_place) copy_memory(out + blocks.offset(me, esize), in, mine);
    return;
  }
  const std::size_t chunk = kStreamChunkBytes;
  if (largest > kMaxStreamedBytes - chunk) {
    // Beyond what a stream's size word holds: the ring, its call check through the slots.
    contribute(c, nullptr, 0);
    check_every_signature(c);
    return allgatherv(c, o.send, o.recv, blocks, o.type);
  }
  exchange_streaming(
      c, [&](int q) { return blocks.bytes(q, esize); }, chunks_of(largest, chunk), chunk,
      [&](std::size_t i, std::byte* at) {
        if (i * chunk < mine) copy_memory(at, in + i * chunk, chunk_length(mine, chunk, i));
      },
      [&](std::size_t i, auto&& round_of) {
        for (int q = 0; q < p; ++q) {
          const std::size_t block = blocks.bytes(q, esize);
          if (i * chunk >= block || (q == me && in_place)) continue;
          std::byte* to = out + blocks.offset(q, esize) + i * chunk;
          copy_memory(to, q == me ? in + i * chunk : round_of(q), chunk_length(block, chunk, i));
        }
      });
}

// What allgatherv needs of a slot, whatever its blocks: a chunk (its
// blocks up to a chunk each, or a round of its stream).
std::size_t shm_allgatherv_need(std::size_t, int) { return kStreamChunkBytes; }

// Reduce-scatter of an input of `total` bytes (in every slot alike) in
// which this rank's block is `count` elements from byte `mine`.
void reduce_scatter_through_slots(const Collective& c, const Operands& o, std::size_t mine,
                                  std::size_t count, std::size_t total) {
  const std::size_t block = bytes_of(count, o.type);
  // This rank's own block only it reads: reduced from where it is, as
  // two-shot's own chunk, in place too (reduce_slots()).
  const auto* in = static_cast<const std::byte*>(o.send);
  std::byte* slot = begin_slot(c, total);
  copy_memory(slot, in, mine);
  copy_memory(slot + mine + block, in + mine + block, total - mine - block);
  c.host->publish(c.sequence, total);
  reduce_slots(c, o.recv, mine, count, total, o.type, o.op, in + mine);
}

void shm_reduce_scatter(const Collective& c, const Operands& o) {
  const std::size_t block = bytes_of(o.count, o.type);
  const auto ranks = static_cast<std::size_t>(c.host->size());
  reduce_scatter_through_slots(c, o, block * static_cast<std::size_t>(c.host->rank()), o.count,
                               block * ranks);
}

// Its count is the whole input's (every rank's alike), its blocks packed.
void shm_reduce_scatter_v(const Collective& c, const Operands& o) {
  const BlockLayout& blocks = o.recv_blocks();
  const int me = c.host->rank();
  reduce_scatter_through_slots(c, o, blocks.offset(me, size_of(o.type)),
                               blocks.counts[static_cast<std::size_t>(me)], bytes_of(o.count, o.type));
}

// Alltoall's chunk when streamed: 64 KiB, less when p - 1 of them do not
// fit a slot (many ranks, small slots), never under a cache line.
std::size_t alltoall_chunk(std::size_t slot_bytes, int p) {
  const std::size_t fits =
      slot_bytes / static_cast<std::size_t>(std::max(p - 1, 1)) / shm::kCacheLine * shm::kCacheLine;
  return std::max(shm::kCacheLine, std::min(kStreamChunkBytes, fits));
}
bool alltoall_streams(std::size_t block, int p) {
  return p > 1 && block * static_cast<std::size_t>(p) > kStreamChunkBytes;
}

// Alltoall: round i is chunk i of each of this rank's blocks for the
// others, in rank order (send and recv never overlap: the call's checks).
void shm_alltoall_streaming(const Collective& c, const Operands& o, std::size_t block) {
  const int p = c.host->size(), me = c.host->rank();
  const auto* in = static_cast<const std::byte*>(o.send);
  auto* out = static_cast<std::byte*>(o.recv);
  const std::size_t chunk = alltoall_chunk(c.host->slot_bytes(), p);
  // Where rank `from`'s round holds the chunk for rank `to`.
  const auto place_in_round = [&](int from, int to) {
    return static_cast<std::size_t>(to < from ? to : to - 1) * chunk;
  };
  const auto at = [&](int q, std::size_t i) { return static_cast<std::size_t>(q) * block + i * chunk; };
  exchange_streaming(
      c, [&](int) { return block * static_cast<std::size_t>(p); }, chunks_of(block, chunk),
      chunk * static_cast<std::size_t>(p - 1),
      [&](std::size_t i, std::byte* round) {
        for (int q = 0; q < p; ++q)
          if (q != me) copy_memory(round + place_in_round(me, q), in + at(q, i), chunk_length(block, chunk, i));
      },
      [&](std::size_t i, auto&& round_of) {
        const std::size_t n = chunk_length(block, chunk, i);
        for (int q = 0; q < p; ++q) {
          const std::byte* from = q == me ? in + at(q, i) : round_of(q) + place_in_round(q, me);
          copy_memory(out + at(q, i), from, n);
        }
      });
}

std::size_t shm_alltoall_need(std::size_t block, int p) {
  if (!alltoall_streams(block, p)) return block * static_cast<std::size_t>(p);
  // The size (p blocks) and the stream (p - 1 blocks in whole chunks) must
  // fit the entry's 31-bit words.
  const std::size_t ranks = static_cast<std::size_t>(p);
  if ((block + kStreamChunkBytes) * ranks > kMaxStreamedBytes) return block * ranks;
  return static_cast<std::size_t>(p - 1) * shm::kCacheLine;  // one round of the smallest chunks
}

void shm_alltoall(const Collective& c, const Operands& o) {
  const std::size_t block = bytes_of(o.count, o.type);
  if (alltoall_streams(block, c.host->size()))
    return shm_alltoall_streaming(c, o, block);
  const std::size_t total = block * static_cast<std::size_t>(c.host->size());
  contribute(c, o.send, total);
  const std::size_t mine = block * static_cast<std::size_t>(c.host->rank());
  auto* out = static_cast<std::byte*>(o.recv);
  for (int q = 0; q < c.host->size(); ++q)
    copy_memory(out + static_cast<std::size_t>(q) * block, wait_for_data(c, q, total) + mine, block);
}

void shm_gather(const Collective& c, const Operands& o) {
  const std::size_t block = bytes_of(o.count, o.type);
  const int me = c.host->rank();
  // As a reduce's: the root compares every signature, the others do later.
  if (me != o.root) return contribute(c, o.send, block);
  // Nobody reads the root's block: it goes from its input to its place.
  contribute(c, nullptr, 0);
  fetch_ahead_from_all(c, block);
  auto* out = static_cast<std::byte*>(o.recv);
  for (int q = 0; q < c.host->size(); ++q)
    if (q != me) copy_memory(out + static_cast<std::size_t>(q) * block, wait_for_data(c, q, block), block);
  std::byte* own = out + static_cast<std::size_t>(me) * block;
  if (own != o.send) copy_memory(own, o.send, block);  // else in place
}

void shm_scatter(const Collective& c, const Operands& o) {
  const std::size_t block = bytes_of(o.count, o.type);
  const std::size_t total = block * static_cast<std::size_t>(c.host->size());
  const bool root = c.host->rank() == o.root;
  contribute(c, o.send, root ? total : 0);
  if (!root) fetch_ahead(c, o.root, total);
  const std::byte* from = wait_for_data(c, o.root, total);
  copy_memory(o.recv, from + block * static_cast<std::size_t>(c.host->rank()), block);
  // As a broadcast's: the others compared the root's signature, the root does later.
}

// ---- The v-forms whose sizes not every rank knows (gatherv, scatterv,
// alltoallv). A block's size is known to its writer and to its reader, and
// to no other rank, so the ranks cannot agree on a size threshold between
// this row and the message rows; the path is chosen per block instead, on
// both sides alike: a block of at most block_limit() bytes goes through its
// writer's slot, a larger one as a message (the transport's cross-memory
// attach: one copy by the kernel where the slot costs two). These rows so
// run at every size.
//
// A rank that writes blocks for several readers (scatterv's root, every
// rank of an alltoallv) puts a table of p block sizes (uint32) first, the
// size of every block it sends, and then, packed in rank order, the blocks
// that go through the slot: a reader finds its block by the sizes before
// its own, and checks its size against what it expects; a block sent as a
// message has no bytes in the slot. Its own block a rank copies directly.
//
//   slot: [ size 0 | size 1 | size 2 | size 3 ][ block 1 | block 3 ]  (block 2 a message)
namespace {

std::size_t block_table_bytes(int p) { return (static_cast<std::size_t>(p) * 4 + 7) / 8 * 8; }

// What a rank's data for a call may take: its ring entry's room, or its
// large slot's, whichever is more.
std::size_t slot_room(const Collective& c) {
  return std::max(c.host->slot_bytes(), shm::kEntryDataBytes);
}

// The largest block that goes through the slot of a rank writing up to
// `blocks_written` blocks, beside their table where `with_table`: at most a
// stream chunk (from there the kernel's one copy beat two copies through
// the slot: small_blocks()), and so that all of them fit.
std::size_t block_limit(const Collective& c, int blocks_written, bool with_table) {
  const std::size_t table = with_table ? block_table_bytes(c.host->size()) : 0;
  return std::min(kStreamChunkBytes,
                  (slot_room(c) - table) / static_cast<std::size_t>(std::max(blocks_written, 1)));
}

// The size a block sent as a message declares in its writer's slot, for its
// reader to compare: its own, up to what the slot's size word holds (the
// message's receive checks the rest).
std::size_t declared_size(std::size_t bytes) { return std::min(bytes, kMaxStreamedBytes); }

// Writes this rank's table and the blocks of `in` (laid out by `blocks`, of
// `esize`-byte elements) for every other rank that go through its slot, and
// publishes them.
void contribute_blocks(const Collective& c, const std::byte* in, const BlockLayout& blocks,
                       std::size_t esize, std::size_t limit) {
  const int p = c.host->size(), me = c.host->rank();
  const std::size_t table = block_table_bytes(p);
  std::size_t packed = 0;
  for (int q = 0; q < p; ++q)
    if (q != me && blocks.bytes(q, esize) <= limit) packed += blocks.bytes(q, esize);
  if (table + packed > slot_room(c))  // block_limit() keeps it in: a bug if not
    throw Error(ErrorCode::internal,
                fmt::format("rank {}: {} bytes of blocks for call #{} do not fit a {}-byte slot",
                            c.host->comm_rank(me), table + packed, c.sequence, slot_room(c)));
  std::byte* slot = begin_slot(c, table + packed);
  std::byte* at = slot + table;
  for (int q = 0; q < p; ++q) {
    const std::size_t n = blocks.bytes(q, esize);
    const auto size = static_cast<std::uint32_t>(std::min<std::size_t>(n, UINT32_MAX));
    std::memcpy(slot + static_cast<std::size_t>(q) * 4, &size, 4);
    if (q == me || n > limit) continue;
    copy_memory(at, in + blocks.offset(q, esize), n);
    at += n;
  }
  c.host->publish(c.sequence, table + packed);
}

// Reads `writer`'s table (its slot holds this call: wait_for_slot) and
// returns where this rank's block is, which must be `bytes` long in
// `esize`-byte elements (null where it comes as a message). A size that
// differs ends the call naming both and `what` (the count that says it),
// as a message's receive does; a table that contradicts its slot, as a
// broken peer's, ends it too.
const std::byte* find_block(const Collective& c, int writer, std::size_t bytes, std::size_t esize,
                            std::size_t limit, const char* what) {
  const shm::Segment& host = *c.host;
  const int p = host.size(), me = host.rank();
  const shm::SlotHeader& header = host.header(writer, c.sequence);
  const std::byte* data = host.data(writer, c.sequence);
  const std::size_t table = block_table_bytes(p), written = header.bytes();
  const std::size_t room = host.room(writer, c.sequence);
  const auto size_of_block = [&](int q) {
    std::uint32_t n = 0;
    std::memcpy(&n, data + static_cast<std::size_t>(q) * 4, 4);
    return std::size_t{n};
  };
  if (written < table || written > room)
    throw Error(ErrorCode::peer_failure,
                fmt::format("rank {}: rank {}'s shared-memory slot for call #{} holds {} bytes, "
                            "not a table of {} block sizes and blocks: a broken peer",
                            host.comm_rank(me), host.comm_rank(writer), c.sequence, written, p));
  const std::size_t theirs = size_of_block(me);
  if (theirs != std::min<std::size_t>(bytes, UINT32_MAX))
    throw Error(ErrorCode::mismatched_collective,
                fmt::format("rank {} sent {} elements where rank {}'s {} expects {}",
                            host.comm_rank(writer), theirs / esize, host.comm_rank(me), what,
                            bytes / esize));
  if (bytes > limit) return nullptr;  // a message
  std::size_t offset = table;
  for (int q = 0; q < me; ++q)
    if (q != writer && size_of_block(q) <= limit) offset += size_of_block(q);
  if (offset > written || written - offset < bytes)
    throw Error(ErrorCode::peer_failure,
                fmt::format("rank {}: rank {}'s shared-memory slot for call #{} holds {} bytes, "
                            "fewer than its table of block sizes says: a broken peer",
                            host.comm_rank(me), host.comm_rank(writer), c.sequence, written));
  return data + offset;
}

// The one message tag of the blocks sent as messages: one per pair and direction.
transport::Tag block_tag(const Collective& c) { return c.message_tag(0, 0, 0); }

}  // namespace

void shm_gatherv(const Collective& c, const Operands& o) {
  const int p = c.host->size(), me = c.host->rank();
  const std::size_t esize = size_of(o.type), limit = block_limit(c, 1, false);
  if (me != o.root) {
    const std::size_t bytes = o.count * esize;
    if (bytes <= limit) return contribute(c, o.send, bytes);
    // Its size in the slot (the root compares it), its bytes as a message.
    begin_slot(c, 0);
    c.host->publish(c.sequence, declared_size(bytes));
    c.wait(*c.transport.isend(o.root, block_tag(c), o.send, bytes));
    return;  // As a reduce's: the root compared every signature, the others do later.
  }
  contribute(c, nullptr, 0);
  fetch_ahead_from_all(c, 0);
  const BlockLayout& blocks = o.recv_blocks();
  auto* out = static_cast<std::byte*>(o.recv);
  std::vector<transport::RequestPtr> receives;
  for (int q = 0; q < p; ++q) {
    if (q == me) continue;
    const std::size_t bytes = blocks.bytes(q, esize);
    // The signature and the size compared, for a message block too.
    const std::byte* from = wait_for_data(c, q, bytes <= limit ? bytes : declared_size(bytes));
    if (bytes <= limit) copy_memory(out + blocks.offset(q, esize), from, bytes);
    else receives.push_back(c.transport.irecv(q, block_tag(c), out + blocks.offset(q, esize), bytes));
  }
  if (o.count != 0 && out + blocks.offset(me, esize) != o.send)
    copy_memory(out + blocks.offset(me, esize), o.send, o.count * esize);
  if (receives.empty()) return;
  c.wait_all(receives);
  for (const auto& receive : receives) expect_whole(c, *receive, esize, "recv_counts");
}

void shm_scatterv(const Collective& c, const Operands& o) {
  const int p = c.host->size(), me = c.host->rank();
  const std::size_t esize = size_of(o.type), limit = block_limit(c, p - 1, true);
  if (me == o.root) {
    const BlockLayout& blocks = o.send_blocks();
    const auto* in = static_cast<const std::byte*>(o.send);
    contribute_blocks(c, in, blocks, esize, limit);
    std::vector<transport::RequestPtr> sends;
    for (int q = 0; q < p; ++q)
      if (q != me && blocks.bytes(q, esize) > limit)
        sends.push_back(c.transport.isend(q, block_tag(c), in + blocks.offset(q, esize), blocks.bytes(q, esize)));
    if (o.count != 0 && in + blocks.offset(me, esize) != o.recv)
      copy_memory(o.recv, in + blocks.offset(me, esize), o.count * esize);
    if (!sends.empty()) c.wait_all(sends);
    return;  // As a broadcast's: the others compared the root's signature, the root does later.
  }
  const std::size_t bytes = o.count * esize;
  contribute(c, nullptr, 0);
  fetch_ahead(c, o.root, 0);
  wait_for_call(c, o.root);
  if (const std::byte* from = find_block(c, o.root, bytes, esize, limit, "recv_count"))
    return copy_memory(o.recv, from, bytes);
  wait_whole(c, *c.transport.irecv(o.root, block_tag(c), o.recv, bytes), esize, "recv_count");
}

void shm_alltoallv(const Collective& c, const Operands& o) {
  const int p = c.host->size(), me = c.host->rank();
  const std::size_t esize = size_of(o.type), limit = block_limit(c, p - 1, true);
  const BlockLayout &sends = o.send_blocks(), &receives = o.recv_blocks();
  const auto* in = static_cast<const std::byte*>(o.send);
  auto* out = static_cast<std::byte*>(o.recv);
  contribute_blocks(c, in, sends, esize, limit);
  std::vector<transport::RequestPtr> messages;
  for (int q = 0; q < p; ++q) {
    if (q == me) continue;
    if (receives.bytes(q, esize) > limit)
      messages.push_back(c.transport.irecv(q, block_tag(c), out + receives.offset(q, esize), receives.bytes(q, esize)));
    if (sends.bytes(q, esize) > limit)
      messages.push_back(c.transport.isend(q, block_tag(c), in + sends.offset(q, esize), sends.bytes(q, esize)));
  }
  if (const std::size_t own = sends.bytes(me, esize))
    copy_memory(out + receives.offset(me, esize), in + sends.offset(me, esize), own);
  for (int q = 0; q < p; ++q) {
    if (q == me) continue;
    const std::size_t bytes = receives.bytes(q, esize);
    wait_for_call(c, q);
    if (const std::byte* from = find_block(c, q, bytes, esize, limit, "recv_counts"))
      copy_memory(out + receives.offset(q, esize), from, bytes);
  }
  if (messages.empty()) return;
  c.wait_all(messages);
  for (const auto& m : messages)
    if (!m->is_send()) expect_whole(c, *m, esize, "recv_counts");
}

std::size_t shm_block_table_need(std::size_t, int p) { return block_table_bytes(p); }

void shm_barrier(const Collective& c, const Operands&) {
  contribute(c, nullptr, 0);
  // Each peer's signature compared as its slot is found, as a small
  // AllReduce's are; every rank's extremes (check_every_signature) only
  // where one differs. Building them for every barrier made MPI_Barrier
  // through libchorus_pmpi at p = 2 take 0.53 us instead of 0.38 (Open
  // MPI: 0.46; docs/performance.md "Fifteenth pass").
  for (int q = 0; q < c.host->size(); ++q)
    if (q != c.host->rank()) wait_for_call(c, q);
}

}  // namespace chorus::coll

namespace chorus::coll {
namespace {

// A leader's message: its host's SignatureExtremes, then (from this offset) its
// host's partial result.
constexpr std::size_t kPartialOffset = 64;

}  // namespace

Collective on_own_host(const Collective& c) {
  Collective own = c;
  own.host = c.own_host;
  return own;
}

std::size_t shm_hierarchical_need(std::size_t bytes, int) { return reduced_offset(bytes) + bytes; }

void shm_hierarchical_allreduce(const Collective& c_all, const Operands& o) {
  const Collective c = on_own_host(c_all);
  shm::Segment& host = *c.host;
  const Topology& topology = *c.topology;
  const std::size_t bytes = bytes_of(o.count, o.type);
  const int me = c.transport.rank();
  std::byte* slot = begin_slot(c, shm_hierarchical_need(bytes, host.size()));
  if (host.rank() != 0) {  // not the leader: its input in the slot, the result from the leader's
    copy_memory(slot, o.send, bytes);
    host.publish(c.sequence, bytes);
    const std::byte* leader = wait_for_data(c, 0, bytes);
    host.wait([&] { return host.has_done_second(0, c.sequence); }, c.deadline, abort_poll(c), [&] {
      return fmt::format("rank {} (this host's leader) to finish call #{}", host.comm_rank(0),
                         c.sequence);
    });
    copy_memory(o.recv, leader + reduced_offset(bytes), bytes);
    return;
  }
  // The leader reads its own input from where it is; its slot says the
  // size (what the others check) and will hold the result.
  host.publish(c.sequence, bytes);
  const int hosts = topology.hosts(), my_host = topology.host_of(me);
  const std::size_t message = kPartialOffset + bytes;
  // What a leader may receive: any size this algorithm runs at, so that a
  // leader that called another count is named, not a truncated receive.
  const std::size_t capacity = kPartialOffset + host.slot_bytes();
  std::byte* buffers = c.scratch_buffer(0, 3 * capacity);
  std::byte* mine = buffers;                 // this leader's message: its hosts' partial so far
  std::byte* theirs = buffers + capacity;    // a partner's
  std::byte* combined = buffers + 2 * capacity;

  // This host's calls (every slot's signature) and its partial: the local
  // ranks' inputs in local-rank order.
  // (With the check off, all-zero signatures: they always agree.)
  auto extremes = SignatureExtremes::of(c.signature ? *c.signature : CallSignature{}, me);
  for (int q = 1; q < host.size() && c.signature != nullptr; ++q) {
    wait_for_slot(c, q);
    extremes.add(signature_in(host, q, c.sequence, *c.signature), host.comm_rank(q));
  }
  // While the calls agree; else the sizes may differ: the data is left
  // alone, and the mismatch named once every leader has every signature.
  const auto agreed = [&] { return extremes.agree(); };
  if (agreed()) {
    if (host.size() == 1) {
      copy_memory(mine + kPartialOffset, o.send, bytes);
    } else {
      reduce::reduce(mine + kPartialOffset, o.send, wait_for_data(c, 1, bytes), o.count, o.type, o.op);
      for (int q = 2; q < host.size(); ++q)
        reduce::reduce(mine + kPartialOffset, wait_for_data(c, q, bytes), o.count, o.type, o.op);
    }
  }

  // The leaders' exchange: recursive doubling over the largest power of two
  // of hosts (log2 steps, one message each way per step); a host beyond it
  // first hands its message to the host `span` below and gets the result
  // back. Partials combine lower host first, so every leader ends with the
  // same bits. Segment kCheckSegment of phase 0: no algorithm's messages use
  // it, so a leader that runs another algorithm never takes these for data.
  int span = 1;
  while (span * 2 <= hosts) span *= 2;
  unsigned step = 0;
  const auto leader_of = [&](int h) { return topology.ranks_on(h).front(); };
  const auto send_to = [&](int h) {
    std::memcpy(mine, &extremes, sizeof extremes);
    return c.transport.isend(leader_of(h), c.message_tag(0, step, kCheckSegment), mine, message);
  };
  // Receives host h's message into `theirs` and takes its signatures.
  const auto receive_from = [&](int h) {
    const auto r = c.transport.irecv(leader_of(h), c.message_tag(0, step, kCheckSegment), theirs,
                                     capacity);
    try {
      c.wait(*r);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::timeout) throw;
      throw Error(ErrorCode::timeout,
                  fmt::format("{} (rank {} leads host {}: it is slow, or its host's ranks called "
                              "another collective, which is found only at the deadline)",
                              e.what(), r->peer(), topology.host_name(h)));
    }
    const auto mismatched_size = [&] {
      return Error(ErrorCode::mismatched_collective,
                   fmt::format("rank {}: rank {} (another host's leader) sent {} bytes for call "
                               "#{}, this rank expected {} (the ranks made different calls)",
                               me, r->peer(), r->received_bytes(), c.sequence, message));
    };
    if (r->received_bytes() < kPartialOffset) throw mismatched_size();
    SignatureExtremes received;
    std::memcpy(&received, theirs, sizeof received);
    if (c.signature != nullptr) extremes.add(received);
    if (r->received_bytes() != message && agreed()) throw mismatched_size();
  };
  // mine = (lower host's partial) op (higher host's).
  const auto combine = [&](bool mine_is_lower) {
    if (agreed())
      reduce::reduce(combined + kPartialOffset, (mine_is_lower ? mine : theirs) + kPartialOffset,
                     (mine_is_lower ? theirs : mine) + kPartialOffset, o.count, o.type, o.op);
    std::swap(mine, combined);
  };
  const bool folded = my_host >= span, folds_in = my_host + span < hosts;
  if (folded) {
    c.wait(*send_to(my_host - span));
  } else {
    if (folds_in) {
      receive_from(my_host + span);
      combine(true);
    }
    for (int bit = 1; bit < span; bit <<= 1) {
      ++step;
      const int partner = my_host ^ bit;
      const auto sent = send_to(partner);
      receive_from(partner);
      c.wait(*sent);
      combine(my_host < partner);
    }
  }
  step = static_cast<unsigned>(std::countr_zero(static_cast<unsigned>(span))) + 1;
  transport::RequestPtr result_sent;
  if (folded) {
    receive_from(my_host - span);
    std::swap(mine, theirs);
  } else if (folds_in) {
    result_sent = send_to(my_host + span);
  }
  if (!agreed())
    throw mismatch_error(c.sequence, extremes, algorithm_name);

  std::byte* result = slot + reduced_offset(bytes);
  copy_memory(result, mine + kPartialOffset, bytes);
  if (o.op == ReduceOp::avg && o.count > 0)
    reduce::divide(result, o.count, o.type, static_cast<std::size_t>(c.transport.size()));
  host.publish_second(c.sequence);
  copy_memory(o.recv, result, bytes);
  if (result_sent) c.wait(*result_sent);
}

}  // namespace chorus::coll
