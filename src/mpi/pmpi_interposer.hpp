// libchorus_pmpi's inside (pmpi_interpose.cpp says what the library does):
// where each MPI call goes and why, the Chorus communicator of each MPI
// communicator, errors as MPI errors, and the generalized requests of
// MPI_Iallreduce. pmpi_interposer.cpp defines it; pmpi_interpose.cpp's MPI
// functions use it.
#pragma once

#include <chorus/mpi.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace chorus::pmpi {

using chorus::DataType;
using chorus::ReduceOp;

// Below this many bytes Open MPI's shared-memory path is faster on one
// host even against Chorus's host segment: through this library an 8-byte
// MPI_Allreduce at p = 2 takes 0.65 us on Chorus against MPI's own 0.52 us
// (the interposer's lookups cost about 0.1 us); from 1 KiB Chorus is faster
// (docs/mpi.md has the measurement). 8-bit integer sums go to Chorus at
// every size (connect() in pmpi_interposer.cpp).
inline constexpr std::size_t kDefaultMinBytes = 1024;

enum Collective {
  kAllreduce,
  kIallreduce,
  kBcast,
  kReduce,
  kAllgather,
  kReduceScatterBlock,
  kAlltoall,
  kBarrier,
  kCollectiveCount
};
inline constexpr const char* kCollectiveNames[kCollectiveCount] = {
    "MPI_Allreduce", "MPI_Iallreduce",          "MPI_Bcast",    "MPI_Reduce",
    "MPI_Allgather", "MPI_Reduce_scatter_block", "MPI_Alltoall", "MPI_Barrier"};

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
  in_place_alltoall,
};
inline constexpr int kRouteCount = 12;
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
    "MPI_IN_PLACE alltoall",
};

// ---- Per communicator

struct CommEntry {
  std::optional<chorus::Communicator> chorus;  // empty once freed
  Route route = Route::chorus;                 // where its calls go
};

struct Interposer {
  // Set once by set_up(); read without the mutex on every call.
  std::atomic<bool> ready{false};
  std::size_t min_bytes = kDefaultMinBytes;
  bool verbose = false;
  // Calls by collective and route; counted without the mutex.
  std::atomic<unsigned long long> calls[kCollectiveCount][kRouteCount] = {};

  std::mutex mutex;  // guards everything below (MPI_THREAD_MULTIPLE programs)
  int keyval = MPI_KEYVAL_INVALID;
  int error_class = 0;
  std::map<std::string, int> error_codes;  // Chorus message -> MPI error code
  std::list<CommEntry> entries;  // in creation order, the same on every rank

  struct Pending {
    std::shared_ptr<chorus::Work> work;  // shared: waited on outside the mutex
    MPI_Comm comm;
  };
  std::map<MPI_Request, Pending> pending;  // our MPI_Iallreduce requests
};

// The one interposer of the process (never destroyed: MPI may call in at exit).
Interposer& interposer();

// Where a call goes; when to Chorus, its arguments as Chorus takes them.
// Every rank decides alike: from the arguments MPI requires to agree. The
// checks cheapest and likeliest to send a call to MPI come first, so that
// a call MPI keeps costs a few comparisons.
struct Taken {
  chorus::Communicator* chorus = nullptr;
  const void* send = nullptr;
  DataType type{};
  ReduceOp op{};
  bool reduces = false;  // type and op were set by reduction()
};

// MPI usable and the communicator given; the first check of every call.
Route start(Interposer& it, MPI_Comm comm);
// The type and op of a reduction, as Chorus's.
Route reduction(MPI_Datatype datatype, MPI_Op op, Taken& taken);
// Calls that only move data take any predefined datatype without holes, as
// bytes: its size, or 0 when it is not one.
std::size_t contiguous_named_size(MPI_Datatype t);
// At least CHORUS_MPI_MIN_BYTES, and a Chorus communicator for `comm`.
Route connect(Interposer& it, std::size_t bytes, MPI_Comm comm, Taken& taken);
int comm_size(MPI_Comm comm);
int comm_rank(MPI_Comm comm);
// The whole decision for a reduction.
Route route(Interposer& it, const void* send, void* recv, int count, MPI_Datatype datatype,
            MPI_Op op, MPI_Comm comm, Taken& taken);
void tally(Interposer& it, Collective c, Route r);
// Reports a Chorus error through `comm`'s MPI error handler (see the .cpp).
int raise_error(Interposer& it, MPI_Comm comm, const char* function, const std::exception& e);
void set_up(Interposer& it);
void print_counts(Interposer& it);

// ---- Generalized requests for MPI_Iallreduce
int query_request(void*, MPI_Status* status);
int free_request(void*);
int cancel_request(void*, int);
struct Failure {
  MPI_Comm comm;
  chorus::Error error;
};
// Marks our requests among `requests` complete where their Chorus work is
// done (all of them, waiting, when `wait`); returns the first error.
std::optional<Failure> settle(int n, const MPI_Request* requests, bool wait);
std::shared_ptr<chorus::Work> first_pending(int n, const MPI_Request* requests);
bool any_pending(int n, const MPI_Request* requests);
void progress_mpi();
int report(std::optional<Failure> failure, const char* function, int rc);

// Waits for our requests among `requests` while letting MPI progress the
// others (a peer may need them before it reaches its MPI_Iallreduce), until
// `done` (which may test MPI's requests) says so or ours are all settled.
template <class Done>
std::optional<Failure> wait_while_progressing(int n, const MPI_Request* requests, Done&& done) {
  std::optional<Failure> failure;
  while (auto work = first_pending(n, requests)) {
    if (auto f = settle(n, requests, false); f && !failure) failure = f;
    if (done()) break;
    progress_mpi();
    try {
      work->wait(std::chrono::microseconds(200));  // sleeps, leaving the core to the work
    } catch (...) {
    }
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

}  // namespace chorus::pmpi
