// libchorus_pmpi's inside (pmpi_interpose.cpp says what the library does):
// where each MPI call goes and why, the Chorus communicator of each MPI
// communicator, errors as MPI errors, and the generalized requests of the
// nonblocking collectives. pmpi_interposer.cpp defines it;
// pmpi_collectives.cpp's and pmpi_interpose.cpp's MPI functions use it.
#pragma once

#include <chorus/mpi.hpp>

#include "mpi/pmpi_datatypes.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace chorus::pmpi {

using chorus::DataType;
using chorus::ReduceOp;

// Below this many bytes Open MPI's shared-memory path is as fast or faster
// on one host even against Chorus's host segment, for the calls not in
// kEverySize, in some of the machine's states: through this library at
// p = 2, 8 B, MPI_Reduce, MPI_Gather and MPI_Scatter run at 0.74-1.15x of
// Open MPI's own time and MPI_Bcast at 0.78-1.16x from one series to the
// next (medians), and at 128 B 0.65-0.76x in one; the nonblocking
// exchanges, since a call waited for at once takes no queue mutex, at
// 1.19-1.20x at 8 B, p = 2, but 0.88-0.96x at 8 B, p = 4, and 0.93-1.03x at
// 128 B, p = 2, MPI_Ibcast at 0.96-1.65x, MPI_Allgatherv at 128 B
// 0.80-0.93x at p = 2 (docs/performance.md "Twenty-second pass" to
// "Twenty-fourth pass").
// From 1 KiB every collective is faster on Chorus (docs/mpi.md has the
// measurements), the nonblocking ones too, since their MPI_Wait runs the
// call itself: 1.25-2.33x of Open MPI's own at p = 2 and 1.52-4.0x at p = 4
// on 2 cores ("Fifteenth pass"). 8-bit integer sums go to Chorus at every
// size (connect() in pmpi_interposer.cpp), and so do the collectives of
// kEverySize and the v-forms whose sizes not every rank knows.
inline constexpr std::size_t kDefaultMinBytes = 1024;

// Every wrapped collective, for the counts CHORUS_MPI_VERBOSE prints.
enum Collective {
  kAllreduce,
  kIallreduce,
  kBcast,
  kIbcast,
  kReduce,
  kIreduce,
  kAllgather,
  kIallgather,
  kAllgatherv,
  kReduceScatterBlock,
  kIreduceScatterBlock,
  kReduceScatter,
  kAlltoall,
  kIalltoall,
  kAlltoallv,
  kGather,
  kGatherv,
  kScatter,
  kScatterv,
  kBarrier,
  kIbarrier,
  kCollectiveCount
};
// The collectives that go to Chorus at every size by default (no
// threshold): through this library at 8-512 B, MPI_Allreduce runs at
// 1.03-1.86x of Open MPI's own time at p = 2 and 1.21-2.49x at p = 4;
// MPI_Allgather, MPI_Alltoall and MPI_Reduce_scatter_block of 8 and 128 B
// at 1.09-1.35x and 1.18-2.2x, and MPI_Reduce_scatter of 8 B at 1.05x and
// 1.95x (docs/performance.md "Fourteenth pass"); MPI_Iallreduce and
// MPI_Ireduce_scatter_block of 8 and 128 B at 1.40-1.66x and 1.78-2.43x
// (medians; "Fifteenth pass"); MPI_Ireduce of 8 B-1 KiB at 1.14-2.27x at
// p = 2 and 3.8-21x at p = 4, every run at least 1.13x ("Sixteenth pass");
// MPI_Barrier at 1.27-1.44x at p = 2 and 1.36-1.96x at p = 3, 4 and 8,
// MPI_Ibarrier level with Open MPI at p = 2 (1.01-1.05x, runs 0.96-1.15)
// and 1.34-1.73x at p = 3, 4 and 8 (medians; "Twenty-second pass"). A
// barrier moves no bytes, so it is below any threshold: without a place
// here it went to Chorus only with CHORUS_MPI_MIN_BYTES=0.
// CHORUS_MPI_MIN_BYTES, when set, applies to them too.
inline constexpr Collective kEverySize[] = {
    kAllreduce,          kIallreduce,          kIreduce,       kAllgather, kAlltoall,
    kReduceScatterBlock, kIreduceScatterBlock, kReduceScatter, kBarrier,   kIbarrier};
inline constexpr const char* kCollectiveNames[kCollectiveCount] = {
    "MPI_Allreduce",  "MPI_Iallreduce",           "MPI_Bcast",
    "MPI_Ibcast",     "MPI_Reduce",               "MPI_Ireduce",
    "MPI_Allgather",  "MPI_Iallgather",           "MPI_Allgatherv",
    "MPI_Reduce_scatter_block", "MPI_Ireduce_scatter_block", "MPI_Reduce_scatter",
    "MPI_Alltoall",   "MPI_Ialltoall",            "MPI_Alltoallv",
    "MPI_Gather",     "MPI_Gatherv",              "MPI_Scatter",
    "MPI_Scatterv",   "MPI_Barrier",              "MPI_Ibarrier"};

// Where a call goes, and why: Chorus, or MPI for one of the other reasons.
enum class Route : std::uint8_t {
  chorus,
  not_initialized,
  invalid_arguments,
  datatype,
  op,
  op_for_datatype,
  below_min_bytes,
  inter_communicator,
  one_rank,
  not_connected,
  finalizing,
  too_large,
  passed_by_setting,
};
inline constexpr int kRouteCount = 13;
inline constexpr const char* kRouteReasons[kRouteCount] = {
    "taken over by Chorus",
    "MPI not initialized or finalized",
    "invalid arguments (MPI reports them)",
    "datatype not taken over",
    "op not taken over",
    "op not defined for the datatype (MPI reports it)",
    "below CHORUS_MPI_MIN_BYTES",
    "inter-communicator",
    "communicator of one rank",
    "Chorus could not connect on this communicator",
    "called while MPI_Finalize ran",
    "more than INT_MAX items in one buffer to stage",
    "named in CHORUS_MPI_PASS",
};

// ---- Per communicator

struct CommEntry {
  std::optional<chorus::Communicator> chorus;  // empty once freed
  Route route = Route::chorus;                 // where its calls go
};

// Whether CHORUS_MPI_VERBOSE is set (neither empty nor 0).
bool verbose_from_env();

struct Interposer {
  // CHORUS_MPI_VERBOSE: count the calls by route and print the counts at
  // MPI_Finalize. Read when the interposer is made, so that calls before
  // MPI_Init are counted too.
  const bool verbose = verbose_from_env();
  // Set once by set_up(); read without the mutex on every call.
  std::atomic<bool> ready{false};
  // Per collective: kDefaultMinBytes, 0 for kEverySize; CHORUS_MPI_MIN_BYTES
  // for all when set.
  std::size_t min_bytes[kCollectiveCount] = {};
  bool min_bytes_given = false;
  bool pass[kCollectiveCount] = {};  // CHORUS_MPI_PASS: always MPI's
  // MPI_THREAD_MULTIPLE: threads may call MPI at once (the pending
  // requests below take the mutex only then).
  bool threads_at_once = true;
  // Calls by collective and route, counted (without the mutex) only when
  // verbose: the shared counter's atomic add is a tenth of what the
  // interposer adds to a small call.
  std::atomic<unsigned long long> calls[kCollectiveCount][kRouteCount] = {};
  // Moves on (under the mutex) whenever an entry is closed or removed: a
  // thread's remembered entry of an older generation is looked up again
  // (communicator_of() in pmpi_interposer.cpp).
  std::atomic<std::uint64_t> generation{1};

  // Guards everything below (MPI_THREAD_MULTIPLE programs); the pending
  // requests only where threads_at_once (pending_lock() in the .cpp).
  std::mutex mutex;
  int keyval = MPI_KEYVAL_INVALID;
  int error_class = 0;
  std::map<std::string, int> error_codes;  // Chorus message -> MPI error code
  std::list<CommEntry> entries;  // in creation order, the same on every rank

  // Our nonblocking collectives' requests, unsettled. A program has few at
  // a time: `pending` is searched in order. Slots are reused (once a
  // program has had n at a time, its requests allocate nothing here) and
  // stay put (a deque), so a thread may wait on its request's work outside
  // the mutex: only the thread that holds a request settles it (MPI
  // forbids two threads using one request at once).
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    chorus::Work work;
    MPI_Comm comm = MPI_COMM_NULL;
    std::function<void()> finish;  // once the work succeeded (unpacking, moving)
  };
  std::deque<Pending> pending_slots;
  std::vector<Pending*> pending;       // in use, in start order
  std::vector<Pending*> free_pending;  // not in use
  // pending.size(), read without the mutex: most requests a program waits
  // for are MPI's own, and find none of ours without taking it.
  std::atomic<std::size_t> pending_count{0};
};

// The one interposer of the process (never destroyed: MPI may call in at exit).
Interposer& interposer();

// Where a call goes; when to Chorus, its arguments as Chorus takes them.
// Every rank decides alike: from what MPI requires to agree (the
// communicator, counts that every rank passes alike, the type signature:
// its bytes and its element type), never from a datatype's handle or
// layout. The checks cheapest and likeliest to send a call to MPI come
// first, so that a call MPI keeps costs a few comparisons.
struct Taken {
  chorus::Communicator* chorus = nullptr;
  TypeInfo info;            // of the call's datatype (a reduction's, or the one described last)
  DataType type{};          // a reduction's element type and op
  ReduceOp op{};
  bool reduces = false;     // type and op were set by reduction()
  // Elements of `type` in `count` items of the reduction's datatype.
  std::size_t elements(int count) const {
    // Without dividing where an item is one element (every predefined
    // type): a division was a third of MPI_Reduce's own time under perf.
    const std::size_t element = chorus::size_of(type);
    const std::size_t per_item = info.size == element ? 1 : info.size / element;
    return static_cast<std::size_t>(count) * per_item;
  }
};

// A size for connect() of calls whose total bytes not every rank knows
// (the v-forms but MPI_Allgatherv and MPI_Reduce_scatter): they are taken
// over at every size, which every rank can decide alike.
inline constexpr std::size_t kAnySize = static_cast<std::size_t>(-1);

// MPI usable, the collective not named in CHORUS_MPI_PASS, and the
// communicator given; the first check of every call.
Route start(Interposer& it, MPI_Comm comm, Collective c);
// The element type and op of a reduction over `datatype`, as Chorus's.
Route reduction(MPI_Datatype datatype, MPI_Op op, Taken& taken);
// At least collective `c`'s CHORUS_MPI_MIN_BYTES, or kAnySize (or an 8-bit
// integer sum).
Route threshold(const Interposer& it, Collective c, std::size_t bytes, const Taken& taken);
// threshold(), then a Chorus communicator for `comm`.
Route connect(Interposer& it, Collective c, std::size_t bytes, MPI_Comm comm, Taken& taken);
int comm_size(MPI_Comm comm);
int comm_rank(MPI_Comm comm);
void tally(Interposer& it, Collective c, Route r);
// Reports a Chorus error through `comm`'s MPI error handler (see the .cpp).
int raise_error(Interposer& it, MPI_Comm comm, const char* function, const std::exception& e);
void set_up(Interposer& it);
void print_counts(Interposer& it);

// ---- Generalized requests for the nonblocking collectives
int query_request(void*, MPI_Status* status);
int free_request(void*);
int cancel_request(void*, int);
struct Failure {
  MPI_Comm comm;
  chorus::Error error;
};
// Marks our requests among `requests` complete where their Chorus work is
// done (all of them, waiting, when `wait`), after running their finish;
// returns the first error.
std::optional<Failure> settle(int n, const MPI_Request* requests, bool wait);
// Waits for each of our requests among `requests` in turn, then completes
// it (MPI_Wait, MPI_Waitall): a call next in its communicator's queue runs
// on this thread, with MPI progressing inside its waits
// (Work::wait_progressing(): a peer may need this rank's other requests
// before it reaches the collective), instead of being handed to Chorus's
// worker and back (8-11 us at 8 B-1 KiB, docs/performance.md "Thirteenth
// pass"). Returns the first error.
std::optional<Failure> wait_for_ours(int n, const MPI_Request* requests);
// The work of the first of our requests among `requests`, or null. Valid
// until this thread settles that request.
chorus::Work* first_pending(int n, const MPI_Request* requests);
bool any_pending(int n, const MPI_Request* requests);
void progress_mpi();
int report(std::optional<Failure> failure, const char* function, int rc);
// Makes `request` a generalized request that completes with `work`.
int start_request(Interposer& it, chorus::Work work, MPI_Comm comm, std::function<void()> finish,
                  MPI_Request* request);

// Settles our requests among `requests` as their work ends, while letting
// MPI progress the others, until `done` (which may test MPI's requests)
// says so or ours are all settled (MPI_Waitany, MPI_Waitsome). Chorus's
// worker runs our calls: the caller may return before one of ours ends,
// and may need to, to reach what lets a peer start that call.
template <class Done>
std::optional<Failure> settle_until(int n, const MPI_Request* requests, Done&& done) {
  std::optional<Failure> failure = settle(n, requests, false);
  while (!done()) {
    chorus::Work* work = first_pending(n, requests);
    if (work == nullptr) break;
    progress_mpi();
    try {
      work->wait(std::chrono::microseconds(200));  // sleeps, leaving the core to the work
    } catch (...) {  // the error is settle()'s to report
    }
    if (auto f = settle(n, requests, false); f && !failure) failure = f;
  }
  return failure;
}

// Runs `body` on Chorus, turning what it throws into the MPI error of `comm`.
template <class Body>
int on_chorus(Interposer& it, MPI_Comm comm, const char* function, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return raise_error(it, comm, function, e);
  }
  return MPI_SUCCESS;
}

// Runs a taken-over call on Chorus. `start(async)` makes Chorus's blocking
// call (returning an empty Work) or its async form; `finish()` runs once
// Chorus is done: at once when `request` is null, else in the MPI_Wait or
// MPI_Test that completes the generalized request `request` becomes; it
// must hold every Staged the call uses, which keeps their staging copies
// alive until then. What either throws becomes the MPI error of `comm`.
template <class Start, class Finish>
int run(Interposer& it, MPI_Comm comm, const char* function, MPI_Request* request,
        Start&& start, Finish&& finish) {
  try {
    if (request == nullptr) {
      start(false);
      finish();
      return MPI_SUCCESS;
    }
    chorus::Work work = start(true);
    return start_request(it, std::move(work), comm, std::function<void()>(std::forward<Finish>(finish)),
                         request);
  } catch (const std::exception& e) {
    return raise_error(it, comm, function, e);
  }
}
// A call with nothing to do once Chorus is done (no staging copies).
template <class Start>
int run(Interposer& it, MPI_Comm comm, const char* function, MPI_Request* request, Start&& start) {
  return run(it, comm, function, request, std::forward<Start>(start), [] {});
}

}  // namespace chorus::pmpi
