// libchorus_pmpi: runs an unchanged MPI program's MPI_Allreduce,
// MPI_Iallreduce, MPI_Bcast, MPI_Reduce, MPI_Allgather,
// MPI_Reduce_scatter_block, MPI_Alltoall and MPI_Barrier on Chorus, through
// the MPI profiling interface.
//
//   mpirun -np 4 -x LD_PRELOAD=libchorus_pmpi.so ./program
//
// This library defines MPI_ functions; loaded first, its definitions win over
// libmpi's, and it reaches MPI itself through the PMPI_ names. What it takes
// over (docs/mpi.md):
//  - calls on intra-communicators of two or more ranks, of at least
//    CHORUS_MPI_MIN_BYTES, MPI_IN_PLACE included (but for Alltoall): for
//    reductions, a predefined datatype that maps exactly onto a Chorus one
//    and a predefined op Chorus has (MPI_SUM, PROD, MIN, MAX, BAND, BOR,
//    BXOR); for data movement, any predefined datatype without holes;
//  - everything else goes to PMPI_ unchanged, and is counted with its reason
//    (CHORUS_MPI_VERBOSE=1 prints the counts at MPI_Finalize).
// Every rank of a communicator decides alike, from arguments MPI requires to
// agree, so a call never runs on Chorus on one rank and on MPI on another.
//
// One Chorus communicator per MPI communicator, made at its first taken-over
// call (collective: every rank makes that call), kept in an MPI attribute
// whose delete callback frees it on MPI_Comm_free, and freed at
// MPI_Finalize otherwise. Chorus's errors go to the communicator's MPI error
// handler as MPI error codes whose MPI_Error_string is Chorus's message.
#include <chorus/mpi.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace {

using chorus::DataType;
using chorus::ReduceOp;

// ---- What maps onto Chorus -------------------------------------------------

// The Chorus type of a predefined MPI datatype with exactly its
// representation; MPI_BYTE (bitwise ops only, as MPI allows) is uint8.
std::optional<DataType> chorus_type(MPI_Datatype t, MPI_Op op) {
  if (t == MPI_FLOAT) return DataType::float32;
  if (t == MPI_DOUBLE) return DataType::float64;
  if (t == MPI_INT || t == MPI_INT32_T) return DataType::int32;
  if (t == MPI_UNSIGNED || t == MPI_UINT32_T) return DataType::uint32;
  if (t == MPI_INT64_T || t == MPI_LONG_LONG_INT || t == MPI_LONG_LONG) return DataType::int64;
  if (t == MPI_UINT64_T || t == MPI_UNSIGNED_LONG_LONG) return DataType::uint64;
  if (t == MPI_LONG) return sizeof(long) == 8 ? DataType::int64 : DataType::int32;
  if (t == MPI_UNSIGNED_LONG) return sizeof(long) == 8 ? DataType::uint64 : DataType::uint32;
  if (t == MPI_INT8_T || t == MPI_SIGNED_CHAR) return DataType::int8;
  if (t == MPI_UINT8_T || t == MPI_UNSIGNED_CHAR) return DataType::uint8;
  if (t == MPI_BYTE && (op == MPI_BAND || op == MPI_BOR || op == MPI_BXOR)) return DataType::uint8;
  return std::nullopt;
}

std::optional<ReduceOp> chorus_op(MPI_Op op) {
  if (op == MPI_SUM) return ReduceOp::sum;
  if (op == MPI_PROD) return ReduceOp::prod;
  if (op == MPI_MIN) return ReduceOp::min;
  if (op == MPI_MAX) return ReduceOp::max;
  if (op == MPI_BAND) return ReduceOp::band;
  if (op == MPI_BOR) return ReduceOp::bor;
  if (op == MPI_BXOR) return ReduceOp::bxor;
  return std::nullopt;
}

// ---- Settings and counts -------------------------------------------------

// Below this many bytes Open MPI's shared-memory path is faster on one
// host: at p = 2 MPI wins up to 2 KiB, ties at 4 KiB, and Chorus is 1.3-1.7x
// faster from 8 KiB to 64 KiB (docs/mpi.md has the measurement).
constexpr std::size_t kDefaultMinBytes = 8 * 1024;

std::size_t min_bytes_from_env() {
  const char* env = std::getenv("CHORUS_MPI_MIN_BYTES");
  if (env == nullptr || *env == '\0') return kDefaultMinBytes;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(env, &end, 10);
  std::size_t scale = 1;
  if (*end == 'K' || *end == 'k') scale = 1024, ++end;
  else if (*end == 'M' || *end == 'm') scale = 1024 * 1024, ++end;
  else if (*end == 'G' || *end == 'g') scale = std::size_t{1} << 30, ++end;
  if (end == env || *end != '\0' || env[0] == '-') {
    std::fprintf(stderr,
                 "chorus_pmpi: CHORUS_MPI_MIN_BYTES='%s' is not a byte count (like 65536 or 64K); "
                 "using %zu\n",
                 env, kDefaultMinBytes);
    return kDefaultMinBytes;
  }
  return static_cast<std::size_t>(value) * scale;
}

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
constexpr const char* kCollectiveNames[kCollectiveCount] = {
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
constexpr int kRouteCount = 12;
constexpr const char* kRouteReasons[kRouteCount] = {
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

// ---- Per communicator -------------------------------------------------------

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

Interposer& interposer() {
  static Interposer* it = new Interposer;  // never destroyed: MPI may call in at exit
  return *it;
}

int delete_entry(MPI_Comm, int, void* attribute, void*) {
  auto& it = interposer();
  std::lock_guard lock(it.mutex);
  auto* entry = static_cast<CommEntry*>(attribute);
  entry->chorus.reset();  // finishes its pending work, then closes
  it.entries.remove_if([&](const CommEntry& e) { return &e == entry; });
  return MPI_SUCCESS;
}

// Needs MPI initialized. From MPI_Init, or from the first call when MPI was
// initialized some other way.
void set_up(Interposer& it) {
  std::lock_guard lock(it.mutex);
  if (it.ready.load(std::memory_order_acquire)) return;
  PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_entry, &it.keyval, nullptr);
  PMPI_Add_error_class(&it.error_class);
  it.min_bytes = min_bytes_from_env();
  const char* verbose = std::getenv("CHORUS_MPI_VERBOSE");
  it.verbose = verbose != nullptr && *verbose != '\0' && std::strcmp(verbose, "0") != 0;
  it.ready.store(true, std::memory_order_release);
}

bool mpi_usable() {
  int initialized = 0, finalized = 0;
  PMPI_Initialized(&initialized);
  PMPI_Finalized(&finalized);
  return initialized && !finalized;
}

// The Chorus communicator of `comm`, made on its first taken-over call
// (collective: every rank makes that call), or null with the route its
// calls take instead. Connecting happens without the mutex, so that other
// threads may use other communicators meanwhile (MPI forbids two threads
// in collectives on one communicator).
chorus::Communicator* communicator_of(Interposer& it, MPI_Comm comm, Route& route) {
  std::unique_lock lock(it.mutex);
  void* attribute = nullptr;
  int found = 0;
  if (PMPI_Comm_get_attr(comm, it.keyval, &attribute, &found) != MPI_SUCCESS) {
    route = Route::invalid_arguments;
    return nullptr;
  }
  if (!found) {
    int inter = 0, size = 0;
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_size(comm, &size);
    auto& entry = it.entries.emplace_back();
    if (inter) {
      entry.route = Route::inter_communicator;
    } else if (size < 2) {
      entry.route = Route::one_rank;
    } else {
      lock.unlock();
      std::string failure;
      try {
        entry.chorus.emplace(chorus::Communicator::from_mpi(comm));
      } catch (const std::exception& e) {
        failure = e.what();
      }
      // Chorus is used only where every rank connected, so that no call
      // runs on Chorus on one rank and on MPI on another.
      int ok = failure.empty() ? 1 : 0, all_ok = 0;
      PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
      lock.lock();
      if (!all_ok) {
        entry.chorus.reset();
        entry.route = Route::not_connected;
        std::fprintf(stderr, "chorus_pmpi: Chorus could not connect %s: %s; this communicator's "
                     "calls go to MPI\n", failure.empty() ? "on another rank" : "",
                     failure.c_str());
      }
    }
    attribute = &entry;
    PMPI_Comm_set_attr(comm, it.keyval, attribute);
  }
  auto* entry = static_cast<CommEntry*>(attribute);
  if (!entry->chorus) {
    route = entry->route == Route::chorus ? Route::finalizing : entry->route;
    return nullptr;
  }
  return &*entry->chorus;
}

// Where a call goes; when to Chorus, its arguments as Chorus takes them.
// Every rank decides alike: from the arguments MPI requires to agree. The
// checks cheapest and likeliest to send a call to MPI come first, so that
// a call MPI keeps costs a few comparisons.
struct Taken {
  chorus::Communicator* chorus = nullptr;
  const void* send = nullptr;
  DataType type{};
  ReduceOp op{};
};

// MPI usable and the communicator given; the first check of every call.
Route start(Interposer& it, MPI_Comm comm) {
  if (!it.ready.load(std::memory_order_acquire)) {
    if (!mpi_usable()) return Route::not_initialized;
    set_up(it);
  }
  return comm == MPI_COMM_NULL ? Route::invalid_arguments : Route::chorus;
}

// The type and op of a reduction, as Chorus's.
Route reduction(MPI_Datatype datatype, MPI_Op op, Taken& taken) {
  const auto type = chorus_type(datatype, op);
  if (!type) return Route::datatype;
  const auto chorus_op_ = chorus_op(op);
  if (!chorus_op_) return Route::op;
  if (!chorus::is_supported(*type, *chorus_op_)) return Route::op_for_datatype;
  taken.type = *type;
  taken.op = *chorus_op_;
  return Route::chorus;
}

// Calls that only move data take any predefined datatype without holes, as
// bytes: its size, or 0 when it is not one.
std::size_t contiguous_named_size(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return 0;
  int integers = 0, addresses = 0, datatypes = 0, combiner = 0;
  if (PMPI_Type_get_envelope(t, &integers, &addresses, &datatypes, &combiner) != MPI_SUCCESS ||
      combiner != MPI_COMBINER_NAMED)
    return 0;
  int size = 0;
  MPI_Aint lb = 0, extent = 0;
  if (PMPI_Type_size(t, &size) != MPI_SUCCESS || PMPI_Type_get_extent(t, &lb, &extent) != MPI_SUCCESS)
    return 0;
  return size > 0 && lb == 0 && extent == size ? static_cast<std::size_t>(size) : 0;
}

// Past the argument checks: the size threshold, then the communicator.
Route connect(Interposer& it, std::size_t bytes, MPI_Comm comm, Taken& taken) {
  if (bytes < it.min_bytes) return Route::below_min_bytes;
  Route r = Route::chorus;
  taken.chorus = communicator_of(it, comm, r);
  return taken.chorus ? Route::chorus : r;
}

int comm_size(MPI_Comm comm) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  return size;
}
int comm_rank(MPI_Comm comm) {
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  return rank;
}

Route route(Interposer& it, const void* send, void* recv, int count, MPI_Datatype datatype,
            MPI_Op op, MPI_Comm comm, Taken& taken) {
  if (Route r = start(it, comm); r != Route::chorus) return r;
  if (count < 0 || (count > 0 && recv == nullptr)) return Route::invalid_arguments;
  if (Route r = reduction(datatype, op, taken); r != Route::chorus) return r;
  taken.send = send == MPI_IN_PLACE ? recv : send;
  return connect(it, static_cast<std::size_t>(count) * chorus::size_of(taken.type), comm, taken);
}

void tally(Interposer& it, Collective c, Route r) {
  it.calls[c][static_cast<int>(r)].fetch_add(1, std::memory_order_relaxed);
}

// Reports a Chorus error through `comm`'s MPI error handler: returns the MPI
// error code (MPI_ERRORS_RETURN), or does not return (MPI_ERRORS_ARE_FATAL,
// after printing the whole message).
int raise_error(Interposer& it, MPI_Comm comm, const char* function, const std::exception& e) {
  std::string message = std::string("chorus: ") + function + ": " + e.what();
  int code = 0;
  {
    std::lock_guard lock(it.mutex);
    if (auto known = it.error_codes.find(message); known != it.error_codes.end()) {
      code = known->second;
    } else {
      PMPI_Add_error_code(it.error_class, &code);
      // The whole message is printed below when fatal; MPI's copy is cut
      // short because Open MPI 4.1's fatal handler fails on long ones
      // ("ORTE_ERROR_LOG: Data unpack would read past end of buffer").
      std::string text = message.substr(0, 200);
      PMPI_Add_error_string(code, text.c_str());
      it.error_codes.emplace(message, code);
    }
  }
  MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
  PMPI_Comm_get_errhandler(comm, &handler);
  if (handler == MPI_ERRORS_ARE_FATAL) std::fprintf(stderr, "%s\n", message.c_str());
  if (handler != MPI_ERRHANDLER_NULL) PMPI_Errhandler_free(&handler);
  PMPI_Comm_call_errhandler(comm, code);
  return code;
}

// ---- Generalized requests for MPI_Iallreduce ------------------------------------

int query_request(void*, MPI_Status* status) {
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  return MPI_SUCCESS;
}
int free_request(void*) { return MPI_SUCCESS; }
int cancel_request(void*, int) { return MPI_SUCCESS; }  // a collective cannot be cancelled

// Marks our requests among `requests` complete where their Chorus work is
// done (all of them, waiting, when `wait`), so that the PMPI_ call that
// follows sees them complete. Returns the first error, with its comm.
struct Failure {
  MPI_Comm comm;
  chorus::Error error;
};
std::optional<Failure> settle(int n, const MPI_Request* requests, bool wait) {
  auto& it = interposer();
  std::optional<Failure> failure;
  for (int i = 0; i < n; ++i) {
    std::unique_lock lock(it.mutex);
    auto found = it.pending.find(requests[i]);
    if (found == it.pending.end()) continue;
    const auto work = found->second.work;
    const MPI_Comm comm = found->second.comm;
    if (wait) {
      lock.unlock();  // blocks without the mutex; only this thread may wait on it
      try {
        work->wait();
      } catch (...) {
      }
      lock.lock();
    } else if (!work->test()) {
      continue;
    }
    if (auto error = work->error(); error && !failure) failure = Failure{comm, *error};
    it.pending.erase(requests[i]);
    PMPI_Grequest_complete(requests[i]);
  }
  return failure;
}

// The Chorus work of the first of our requests among `requests`, if any.
std::shared_ptr<chorus::Work> first_pending(int n, const MPI_Request* requests) {
  auto& it = interposer();
  std::lock_guard lock(it.mutex);
  if (it.pending.empty()) return nullptr;
  for (int i = 0; i < n; ++i)
    if (auto found = it.pending.find(requests[i]); found != it.pending.end())
      return found->second.work;
  return nullptr;
}

bool any_pending(int n, const MPI_Request* requests) { return first_pending(n, requests) != nullptr; }

// Lets MPI progress its own requests without completing any of the caller's.
void progress_mpi() {
  int flag = 0;
  PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
}

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

int report(std::optional<Failure> failure, const char* function, int rc) {
  if (!failure) return rc;
  return raise_error(interposer(), failure->comm, function, failure->error);
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

void print_counts(Interposer& it) {
  int rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string text;
  for (int c = 0; c < kCollectiveCount; ++c) {
    unsigned long long passed = 0;
    std::string reasons;
    for (int r = 1; r < kRouteCount; ++r) {
      const auto calls = it.calls[c][r].load();
      if (calls == 0) continue;
      passed += calls;
      reasons += (reasons.empty() ? "" : "; ") + std::to_string(calls) + " " + kRouteReasons[r];
    }
    text += "chorus_pmpi: rank " + std::to_string(rank) + ": " + kCollectiveNames[c] + ": " +
            std::to_string(it.calls[c][0].load()) + " calls taken over by Chorus, " +
            std::to_string(passed) + " passed to MPI" +
            (reasons.empty() ? "" : " (" + reasons + ")") + "\n";
  }
  text += "chorus_pmpi: rank " + std::to_string(rank) +
          ": CHORUS_MPI_MIN_BYTES=" + std::to_string(it.min_bytes) + "\n";
  std::fputs(text.c_str(), stderr);
}

}  // namespace

// ---- The MPI functions ---------------------------------------------------------

extern "C" {

int MPI_Init(int* argc, char*** argv) {
  const int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) set_up(interposer());
  return rc;
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) set_up(interposer());
  return rc;
}

int MPI_Finalize() {
  auto& it = interposer();
  std::list<CommEntry> closing;
  {
    std::lock_guard lock(it.mutex);
    if (it.ready && it.verbose) print_counts(it);
    // Communicators the program never freed: closed in creation order, the
    // same on every rank. Their entries stay until PMPI_Finalize has run the
    // attributes' delete callbacks.
    for (auto& entry : it.entries) entry.chorus.reset();
  }
  const int rc = PMPI_Finalize();
  std::lock_guard lock(it.mutex);
  it.entries.clear();
  return rc;
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  const Route r = route(it, sendbuf, recvbuf, count, datatype, op, comm, taken);
  tally(it, kAllreduce, r);
  if (r != Route::chorus) return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  return on_chorus(it, comm, "MPI_Allreduce", [&] {
    taken.chorus->allreduce(taken.send, recvbuf, static_cast<std::size_t>(count), taken.type,
                            taken.op);
  });
}

int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                   MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  auto& it = interposer();
  Taken taken;
  const Route r = request == nullptr
                      ? Route::invalid_arguments
                      : route(it, sendbuf, recvbuf, count, datatype, op, comm, taken);
  tally(it, kIallreduce, r);
  if (r != Route::chorus)
    return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  chorus::Work work;
  try {
    work = taken.chorus->allreduce_async(taken.send, recvbuf, static_cast<std::size_t>(count),
                                         taken.type, taken.op);
  } catch (const std::exception& e) {
    return raise_error(it, comm, "MPI_Iallreduce", e);
  }
  const int rc = PMPI_Grequest_start(query_request, free_request, cancel_request, nullptr, request);
  if (rc != MPI_SUCCESS) {
    try {
      work.wait();
    } catch (...) {
    }
    return rc;
  }
  std::lock_guard lock(it.mutex);
  it.pending.emplace(*request,
                     Interposer::Pending{std::make_shared<chorus::Work>(std::move(work)), comm});
  return MPI_SUCCESS;
}

int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  const std::size_t size = contiguous_named_size(datatype);
  Route r = start(it, comm);
  if (r == Route::chorus && count < 0) r = Route::invalid_arguments;
  if (r == Route::chorus && size == 0) r = Route::datatype;
  if (r == Route::chorus) r = connect(it, static_cast<std::size_t>(count) * size, comm, taken);
  tally(it, kBcast, r);
  if (r != Route::chorus) return PMPI_Bcast(buffer, count, datatype, root, comm);
  return on_chorus(it, comm, "MPI_Bcast", [&] {
    taken.chorus->broadcast(buffer, static_cast<std::size_t>(count) * size, DataType::uint8, root);
  });
}

int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               int root, MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  // recvbuf matters at the root only, so it is no part of the decision.
  Route r = start(it, comm);
  if (r == Route::chorus && count < 0) r = Route::invalid_arguments;
  if (r == Route::chorus) r = reduction(datatype, op, taken);
  if (r == Route::chorus)
    r = connect(it, static_cast<std::size_t>(count) * chorus::size_of(taken.type), comm, taken);
  tally(it, kReduce, r);
  if (r != Route::chorus) return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
  const void* send = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  return on_chorus(it, comm, "MPI_Reduce", [&] {
    taken.chorus->reduce(send, recvbuf, static_cast<std::size_t>(count), taken.type, taken.op, root);
  });
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  // Decided on the receive side, which every rank describes alike; the
  // send side must then hold the same bytes (else the call is erroneous).
  const std::size_t size = contiguous_named_size(recvtype);
  Route r = start(it, comm);
  if (r == Route::chorus && (recvcount < 0 || (sendbuf != MPI_IN_PLACE && sendcount < 0)))
    r = Route::invalid_arguments;
  if (r == Route::chorus && size == 0) r = Route::datatype;
  const std::size_t block = static_cast<std::size_t>(recvcount) * size;
  if (r == Route::chorus) r = connect(it, block * static_cast<std::size_t>(comm_size(comm)), comm, taken);
  tally(it, kAllgather, r);
  if (r != Route::chorus)
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  return on_chorus(it, comm, "MPI_Allgather", [&] {
    const void* send = sendbuf;
    if (sendbuf == MPI_IN_PLACE) {
      send = static_cast<std::byte*>(recvbuf) + static_cast<std::size_t>(comm_rank(comm)) * block;
    } else if (static_cast<std::size_t>(sendcount) * contiguous_named_size(sendtype) != block) {
      throw chorus::Error(chorus::ErrorCode::invalid_argument,
                          "the send side does not hold the bytes of one receive block");
    }
    taken.chorus->allgather(send, recvbuf, block, DataType::uint8);
  });
}

int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                             MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  Route r = start(it, comm);
  if (r == Route::chorus && recvcount < 0) r = Route::invalid_arguments;
  if (r == Route::chorus) r = reduction(datatype, op, taken);
  const std::size_t block = static_cast<std::size_t>(recvcount) * chorus::size_of(taken.type);
  if (r == Route::chorus) r = connect(it, block * static_cast<std::size_t>(comm_size(comm)), comm, taken);
  tally(it, kReduceScatterBlock, r);
  if (r != Route::chorus)
    return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
  return on_chorus(it, comm, "MPI_Reduce_scatter_block", [&] {
    const auto n = static_cast<std::size_t>(recvcount);
    if (sendbuf != MPI_IN_PLACE) {
      taken.chorus->reduce_scatter(sendbuf, recvbuf, n, taken.type, taken.op);
      return;
    }
    // In place, MPI's input is all of recvbuf and the result goes to its
    // start; Chorus's result lands in this rank's block, moved after.
    auto* all = static_cast<std::byte*>(recvbuf);
    std::byte* mine = all + static_cast<std::size_t>(comm_rank(comm)) * block;
    taken.chorus->reduce_scatter(all, mine, n, taken.type, taken.op);
    if (mine != all && block) std::memmove(all, mine, block);
  });
}

int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  const std::size_t size = contiguous_named_size(recvtype);
  Route r = start(it, comm);
  if (r == Route::chorus && sendbuf == MPI_IN_PLACE) r = Route::in_place_alltoall;
  if (r == Route::chorus && (recvcount < 0 || sendcount < 0)) r = Route::invalid_arguments;
  if (r == Route::chorus && size == 0) r = Route::datatype;
  const std::size_t block = static_cast<std::size_t>(recvcount) * size;
  if (r == Route::chorus) r = connect(it, block * static_cast<std::size_t>(comm_size(comm)), comm, taken);
  tally(it, kAlltoall, r);
  if (r != Route::chorus)
    return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  return on_chorus(it, comm, "MPI_Alltoall", [&] {
    if (static_cast<std::size_t>(sendcount) * contiguous_named_size(sendtype) != block)
      throw chorus::Error(chorus::ErrorCode::invalid_argument,
                          "the send blocks do not hold the bytes of the receive blocks");
    taken.chorus->alltoall(sendbuf, recvbuf, block, DataType::uint8);
  });
}

// A barrier moves no bytes: it goes to Chorus only with CHORUS_MPI_MIN_BYTES=0.
int MPI_Barrier(MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  Route r = start(it, comm);
  if (r == Route::chorus) r = connect(it, 0, comm, taken);
  tally(it, kBarrier, r);
  if (r != Route::chorus) return PMPI_Barrier(comm);
  return on_chorus(it, comm, "MPI_Barrier", [&] { taken.chorus->barrier(); });
}

int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  if (request == nullptr || !any_pending(1, request)) return PMPI_Wait(request, status);
  auto failure = wait_while_progressing(1, request, [] { return false; });
  const int rc = PMPI_Wait(request, status);
  return report(std::move(failure), "MPI_Wait", rc);
}

int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  if (request == nullptr || !any_pending(1, request)) return PMPI_Test(request, flag, status);
  auto failure = settle(1, request, false);
  const int rc = PMPI_Test(request, flag, status);
  return report(std::move(failure), "MPI_Test", rc);
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  if (requests == nullptr || !any_pending(count, requests))
    return PMPI_Waitall(count, requests, statuses);
  auto failure = wait_while_progressing(count, requests, [] { return false; });
  const int rc = PMPI_Waitall(count, requests, statuses);
  return report(std::move(failure), "MPI_Waitall", rc);
}

int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  if (requests == nullptr || !any_pending(count, requests))
    return PMPI_Testall(count, requests, flag, statuses);
  auto failure = settle(count, requests, false);
  const int rc = PMPI_Testall(count, requests, flag, statuses);
  return report(std::move(failure), "MPI_Testall", rc);
}

int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  if (requests == nullptr || !any_pending(count, requests))
    return PMPI_Waitany(count, requests, index, status);
  int rc = MPI_SUCCESS, flag = 0;
  auto failure = wait_while_progressing(count, requests, [&] {
    rc = PMPI_Testany(count, requests, index, &flag, status);
    return flag != 0 || rc != MPI_SUCCESS;
  });
  if (!flag && rc == MPI_SUCCESS) rc = PMPI_Waitany(count, requests, index, status);
  return report(std::move(failure), "MPI_Waitany", rc);
}

int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  if (requests == nullptr || !any_pending(count, requests))
    return PMPI_Testany(count, requests, index, flag, status);
  auto failure = settle(count, requests, false);
  const int rc = PMPI_Testany(count, requests, index, flag, status);
  return report(std::move(failure), "MPI_Testany", rc);
}

int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                 MPI_Status statuses[]) {
  if (requests == nullptr || !any_pending(incount, requests))
    return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  int rc = MPI_SUCCESS;
  *outcount = 0;
  auto failure = wait_while_progressing(incount, requests, [&] {
    rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
    return *outcount != 0 || rc != MPI_SUCCESS;
  });
  if (*outcount == 0 && rc == MPI_SUCCESS)
    rc = PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  return report(std::move(failure), "MPI_Waitsome", rc);
}

int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                 MPI_Status statuses[]) {
  if (requests == nullptr || !any_pending(incount, requests))
    return PMPI_Testsome(incount, requests, outcount, indices, statuses);
  auto failure = settle(incount, requests, false);
  const int rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
  return report(std::move(failure), "MPI_Testsome", rc);
}

int MPI_Request_get_status(MPI_Request request, int* flag, MPI_Status* status) {
  if (!any_pending(1, &request)) return PMPI_Request_get_status(request, flag, status);
  auto failure = settle(1, &request, false);
  const int rc = PMPI_Request_get_status(request, flag, status);
  return report(std::move(failure), "MPI_Request_get_status", rc);
}

int MPI_Request_free(MPI_Request* request) {
  // Freeing an active request lets it finish unobserved; ours must still be
  // completed, so it is waited for here.
  if (request != nullptr && any_pending(1, request)) (void)settle(1, request, true);
  return PMPI_Request_free(request);
}

}  // extern "C"
