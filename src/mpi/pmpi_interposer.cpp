#include "mpi/pmpi_interposer.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <limits>
#include <vector>

namespace chorus::pmpi {

// ---- What maps onto Chorus -------------------------------------------------

namespace {

// A predefined op on an element, as Chorus's op. Logical ops on MPI_C_BOOL
// (0 or 1) are exactly min, max and bitwise xor.
Route op_for(const Element& element, MPI_Op op, ReduceOp& out) {
  using Kind = Element::Kind;
  const bool bitwise = op == MPI_BAND || op == MPI_BOR || op == MPI_BXOR;
  const bool logical = op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR;
  const bool arithmetic = op == MPI_SUM || op == MPI_PROD || op == MPI_MIN || op == MPI_MAX;
  if (!bitwise && !logical && !arithmetic) return Route::op;  // MAXLOC, REPLACE, user ops
  switch (element.kind) {
    case Kind::boolean:
      if (!logical) return Route::op_for_datatype;
      out = op == MPI_LAND ? ReduceOp::min : op == MPI_LOR ? ReduceOp::max : ReduceOp::bxor;
      return Route::chorus;
    case Kind::byte:
      if (!bitwise) return Route::op_for_datatype;
      break;
    case Kind::number:
      if (logical) return Route::op;  // Chorus has no logical ops on numbers
      break;
  }
  if (op == MPI_SUM) out = ReduceOp::sum;
  else if (op == MPI_PROD) out = ReduceOp::prod;
  else if (op == MPI_MIN) out = ReduceOp::min;
  else if (op == MPI_MAX) out = ReduceOp::max;
  else if (op == MPI_BAND) out = ReduceOp::band;
  else if (op == MPI_BOR) out = ReduceOp::bor;
  else out = ReduceOp::bxor;
  return chorus::is_supported(element.type, out) ? Route::chorus : Route::op_for_datatype;
}

}  // namespace

// ---- Settings and counts -------------------------------------------------

// CHORUS_MPI_MIN_BYTES, or nothing when it is not set (or not a byte count).
std::optional<std::size_t> min_bytes_from_env() {
  const char* env = std::getenv("CHORUS_MPI_MIN_BYTES");
  if (env == nullptr || *env == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(env, &end, 10);
  std::size_t scale = 1;
  if (*end == 'K' || *end == 'k') scale = 1024, ++end;
  else if (*end == 'M' || *end == 'm') scale = 1024 * 1024, ++end;
  else if (*end == 'G' || *end == 'g') scale = std::size_t{1} << 30, ++end;
  const bool fits = value <= std::numeric_limits<std::size_t>::max() / scale;
  if (end == env || *end != '\0' || env[0] == '-' || !fits || errno == ERANGE) {
    std::fprintf(stderr,
                 "chorus_pmpi: CHORUS_MPI_MIN_BYTES='%s' is not a byte count that fits (like 65536 or "
                 "64K); using the defaults (%zu; none for MPI_Allreduce, MPI_Allgather, "
                 "MPI_Alltoall, MPI_Reduce_scatter_block and MPI_Reduce_scatter)\n",
                 env, kDefaultMinBytes);
    return std::nullopt;
  }
  return static_cast<std::size_t>(value) * scale;
}

// CHORUS_MPI_PASS: MPI function names (any case, comma-separated) whose
// calls always go to MPI, for a program that a collective makes slower.
void pass_from_env(bool (&pass)[kCollectiveCount]) {
  const char* env = std::getenv("CHORUS_MPI_PASS");
  if (env == nullptr) return;
  std::string list = env;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    std::string name = list.substr(at, comma - at);
    at = comma + 1;
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    if (name.empty()) continue;
    bool known = false;
    for (int c = 0; c < kCollectiveCount; ++c)
      if (strcasecmp(name.c_str(), kCollectiveNames[c]) == 0) pass[c] = known = true;
    if (!known)
      std::fprintf(stderr, "chorus_pmpi: CHORUS_MPI_PASS names '%s', which is not a collective this "
                   "library takes over (MPI_Allreduce, MPI_Ibcast, ...); ignored\n", name.c_str());
  }
}

bool verbose_from_env() {
  const char* verbose = std::getenv("CHORUS_MPI_VERBOSE");
  return verbose != nullptr && *verbose != '\0' && std::strcmp(verbose, "0") != 0;
}

// ---- Per communicator -------------------------------------------------------

Interposer& interposer() {
  static Interposer* it = new Interposer;  // never destroyed: MPI may call in at exit
  return *it;
}

int delete_entry(MPI_Comm, int, void* attribute, void*) {
  auto& it = interposer();
  std::lock_guard lock(it.mutex);
  auto* entry = static_cast<CommEntry*>(attribute);
  it.generation.fetch_add(1, std::memory_order_release);  // before any thread could miss it
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
  const std::optional<std::size_t> given = min_bytes_from_env();
  for (std::size_t& min : it.min_bytes) min = given.value_or(kDefaultMinBytes);
  if (!given)
    for (const Collective c : kEverySize) it.min_bytes[c] = 0;
  it.min_bytes_given = given.has_value();
  pass_from_env(it.pass);
  int provided = MPI_THREAD_SINGLE;
  PMPI_Query_thread(&provided);
  it.threads_at_once = provided == MPI_THREAD_MULTIPLE;
  it.ready.store(true, std::memory_order_release);
}

bool mpi_usable() {
  int initialized = 0, finalized = 0;
  PMPI_Initialized(&initialized);
  PMPI_Finalized(&finalized);
  return initialized && !finalized;
}

namespace {

// The communicator this thread's last taken-over call used, and its entry.
// A call on it again skips the mutex and MPI's attribute lookup, which were
// a third of what the interposer added to an 8-byte MPI_Allreduce. Valid
// while the interposer's generation is the one it was found in: removing
// or closing any entry moves that on, and MPI forbids freeing a
// communicator while another thread still calls on it.
struct LastCommunicator {
  MPI_Comm comm = MPI_COMM_NULL;
  CommEntry* entry = nullptr;
  std::uint64_t generation = 0;
};
thread_local LastCommunicator last_communicator;

// `comm`'s entry, made on its first taken-over call (see communicator_of());
// null when MPI does not know `comm`.
CommEntry* entry_of(Interposer& it, MPI_Comm comm) {
  std::unique_lock lock(it.mutex);
  void* attribute = nullptr;
  int found = 0;
  if (PMPI_Comm_get_attr(comm, it.keyval, &attribute, &found) != MPI_SUCCESS) return nullptr;
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
  last_communicator = {comm, entry, it.generation.load(std::memory_order_relaxed)};
  return entry;
}

}  // namespace

// The Chorus communicator of `comm`, made on its first taken-over call
// (collective: every rank makes that call), or null with the route its
// calls take instead. Connecting happens without the mutex, so that other
// threads may use other communicators meanwhile (MPI forbids two threads
// in collectives on one communicator).
chorus::Communicator* communicator_of(Interposer& it, MPI_Comm comm, Route& route) {
  const LastCommunicator& last = last_communicator;
  const bool remembered =
      last.comm == comm && last.generation == it.generation.load(std::memory_order_acquire);
  CommEntry* entry = remembered ? last.entry : entry_of(it, comm);
  if (entry == nullptr) {
    route = Route::invalid_arguments;
    return nullptr;
  }
  if (!entry->chorus) {
    route = entry->route == Route::chorus ? Route::finalizing : entry->route;
    return nullptr;
  }
  return &*entry->chorus;
}

// MPI usable and the communicator given; the first check of every call.
Route start(Interposer& it, MPI_Comm comm, Collective c) {
  if (!it.ready.load(std::memory_order_acquire)) {
    if (!mpi_usable()) return Route::not_initialized;
    set_up(it);
  }
  if (it.pass[c]) return Route::passed_by_setting;
  return comm == MPI_COMM_NULL ? Route::invalid_arguments : Route::chorus;
}

// The element type and op of a reduction, as Chorus's. A predefined
// datatype is recognized by its handle; any other by its signature, so
// that MPI_Type_contiguous(4, MPI_INT) is taken as MPI_INT is.
Route reduction(MPI_Datatype datatype, MPI_Op op, Taken& taken) {
  if (datatype == MPI_DATATYPE_NULL) return Route::invalid_arguments;
  describe(datatype, taken.info);
  if (!taken.info.valid) return Route::invalid_arguments;
  const std::optional<Element>& element = taken.info.element;
  if (!element) return Route::datatype;
  if (Route r = op_for(*element, op, taken.op); r != Route::chorus) return r;
  taken.type = element->type;
  taken.reduces = true;
  return Route::chorus;
}

// 8-bit integer sums go to Chorus at every size: Open MPI 4.1's op/avx
// saturates them where MPI says they wrap, and Chorus wraps.
Route threshold(const Interposer& it, Collective c, std::size_t bytes, const Taken& taken) {
  const bool mpi_saturates = taken.reduces && taken.op == ReduceOp::sum &&
                             (taken.type == DataType::int8 || taken.type == DataType::uint8);
  return bytes < it.min_bytes[c] && !mpi_saturates ? Route::below_min_bytes : Route::chorus;
}

// Past the argument checks: the size threshold, then the communicator.
Route connect(Interposer& it, Collective c, std::size_t bytes, MPI_Comm comm, Taken& taken) {
  if (threshold(it, c, bytes, taken) != Route::chorus) return Route::below_min_bytes;
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

void tally(Interposer& it, Collective c, Route r) {
  if (it.verbose) it.calls[c][static_cast<int>(r)].fetch_add(1, std::memory_order_relaxed);
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

// ---- Generalized requests of the nonblocking collectives ------------------------

int query_request(void*, MPI_Status* status) {
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  return MPI_SUCCESS;
}
int free_request(void*) { return MPI_SUCCESS; }
int cancel_request(void*, int) { return MPI_SUCCESS; }  // a collective cannot be cancelled

namespace {

// The lock of the pending requests: the mutex only where threads may call
// MPI at once (MPI_THREAD_MULTIPLE). Below that the program makes one MPI
// call at a time, ordered by its own synchronization, and only threads in
// MPI calls touch these requests.
std::unique_lock<std::mutex> pending_lock(Interposer& it) {
  if (it.threads_at_once) return std::unique_lock(it.mutex);
  return std::unique_lock(it.mutex, std::defer_lock);
}

// The slot of the first of our requests among `requests`; null if none.
// Under pending_lock().
Interposer::Pending* find_pending(Interposer& it, int n, const MPI_Request* requests) {
  for (int i = 0; i < n; ++i)
    for (Interposer::Pending* slot : it.pending)
      if (slot->request == requests[i]) return slot;
  return nullptr;
}

// Moves `slot`'s request out, and frees the slot. Under pending_lock().
Interposer::Pending take(Interposer& it, Interposer::Pending* slot) {
  Interposer::Pending mine = std::move(*slot);
  *slot = Interposer::Pending{};
  it.pending.erase(std::find(it.pending.begin(), it.pending.end(), slot));
  it.pending_count.store(it.pending.size(), std::memory_order_release);
  it.free_pending.push_back(slot);
  return mine;
}

// The first of our requests among `requests`, taken (this thread settles
// it), whose work has ended unless `ended_only` is false.
std::optional<Interposer::Pending> take_first(int n, const MPI_Request* requests, bool ended_only) {
  auto& it = interposer();
  if (it.pending_count.load(std::memory_order_acquire) == 0) return std::nullopt;
  const auto lock = pending_lock(it);
  Interposer::Pending* slot = find_pending(it, n, requests);
  if (slot == nullptr || (ended_only && !slot->work.test())) return std::nullopt;
  return take(it, slot);
}

// Runs a taken request's finish if its work succeeded, and completes the
// request; returns its error.
std::optional<Failure> complete(Interposer::Pending& mine) {
  std::optional<chorus::Error> error = mine.work.error();
  if (!error && mine.finish) {
    try {
      mine.finish();
    } catch (const chorus::Error& e) {
      error = e;
    }
  }
  PMPI_Grequest_complete(mine.request);
  if (!error) return std::nullopt;
  return Failure{mine.comm, *error};
}

// Waits for a taken request's work, with MPI progressing: a peer may need
// this rank's other requests before it reaches the collective. (MPI calls
// freeing an active nonblocking collective's request erroneous; Open MPI
// refuses it.)
void wait_progressing(Interposer::Pending& mine) {
  try {
    mine.work.wait_progressing(progress_mpi);
  } catch (...) {  // complete() reports it
  }
}

}  // namespace

std::optional<Failure> settle(int n, const MPI_Request* requests, bool wait) {
  std::optional<Failure> failure;
  // One by one: each request is taken at most once, and a request settled
  // here is not ours any more.
  for (int i = 0; i < n; ++i) {
    auto mine = take_first(1, &requests[i], !wait);
    if (!mine) continue;
    if (wait) wait_progressing(*mine);
    if (auto f = complete(*mine); f && !failure) failure = f;
  }
  return failure;
}

std::optional<Failure> wait_for_ours(int n, const MPI_Request* requests) {
  std::optional<Failure> failure;
  while (auto mine = take_first(n, requests, false)) {
    wait_progressing(*mine);
    if (auto f = complete(*mine); f && !failure) failure = f;
  }
  return failure;
}

int start_request(Interposer& it, chorus::Work work, MPI_Comm comm, std::function<void()> finish,
                  MPI_Request* request) {
  const int rc = PMPI_Grequest_start(query_request, free_request, cancel_request, nullptr, request);
  if (rc != MPI_SUCCESS) {
    try {
      work.wait();
    } catch (...) {
    }
    return rc;
  }
  const auto lock = pending_lock(it);
  Interposer::Pending* slot = nullptr;
  if (it.free_pending.empty()) {
    slot = &it.pending_slots.emplace_back();
  } else {
    slot = it.free_pending.back();
    it.free_pending.pop_back();
  }
  *slot = Interposer::Pending{*request, std::move(work), comm, std::move(finish)};
  it.pending.push_back(slot);
  it.pending_count.store(it.pending.size(), std::memory_order_release);
  return MPI_SUCCESS;
}

chorus::Work* first_pending(int n, const MPI_Request* requests) {
  auto& it = interposer();
  if (it.pending_count.load(std::memory_order_acquire) == 0) return nullptr;
  const auto lock = pending_lock(it);
  Interposer::Pending* slot = find_pending(it, n, requests);
  return slot != nullptr ? &slot->work : nullptr;
}

bool any_pending(int n, const MPI_Request* requests) { return first_pending(n, requests) != nullptr; }

// Lets MPI progress its own requests without completing any of the caller's.
void progress_mpi() {
  int flag = 0;
  PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
}

int report(std::optional<Failure> failure, const char* function, int rc) {
  if (!failure) return rc;
  return raise_error(interposer(), failure->comm, function, failure->error);
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
  text += "chorus_pmpi: rank " + std::to_string(rank) + ": CHORUS_MPI_MIN_BYTES=" +
          std::to_string(it.min_bytes[kBcast]);
  if (!it.min_bytes_given) {
    text += " (0 for";
    for (const Collective c : kEverySize) text += std::string(" ") + kCollectiveNames[c];
    text += ")";
  }
  text += "\n";
  std::fputs(text.c_str(), stderr);
}

}  // namespace chorus::pmpi
