// The engine behind every Communicator: one per communicator. It numbers
// calls in order, chooses each call's algorithm (once, through the
// registry), runs calls on the caller's thread or its async worker, keeps
// the first error (poisoning), aborts, and counts. The public Communicator
// methods are shims onto it (src/api/communicator.cpp); argument checks are
// in core/arguments.cpp, creation in core/create.cpp, split/dup in
// core/split.cpp.
//
// Tools and tests reach it through CommunicatorAccess below; nothing of it
// is in the public headers.
#pragma once

#include <chorus/communicator.hpp>

#include "bootstrap/store.hpp"
#include "coll/call_check.hpp"
#include "coll/registry.hpp"
#include "coll/selector.hpp"
#include "coll/topology.hpp"
#include "common/biased_lock.hpp"
#include "common/tick_clock.hpp"
#include "core/call.hpp"
#include "shm/segment.hpp"
#include "transport/transport.hpp"

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>

namespace chorus {

// What lets a thread waiting on an async call run it itself while it is
// still queued (Communicator::Impl::run_queued_next()): shared by the
// engine and its calls' states, so that a waiter never reaches an engine
// being destroyed (the destructor closes it and waits for the waiters
// inside to leave).
struct QueueAccess {
  explicit QueueAccess(Communicator::Impl* e) : engine(e) {}
  // Runs `target`'s call on this thread if it is next in the queue and no
  // thread runs queued calls now (Communicator::Impl::run_queued_next());
  // false when it did not.
  bool run_if_next(const Work::State* target, double timeout_seconds,
                   const std::function<void()>* progress = nullptr);
  // A deferred call's state: lets the worker start it now (once).
  void expedite(Work::State* target);
  void close();  // no waiter enters after it; returns once those inside left
  Communicator::Impl* const engine;

 private:
  bool enter();  // false once closed
  void leave() { users.fetch_sub(1, std::memory_order_release); }
  // The threads inside (low bits), and kClosed once closed: one atomic
  // word, so that a waiter enters and leaves without a lock (an MPI_Wait
  // of a nonblocking call through libchorus_pmpi enters once per call).
  static constexpr std::uint32_t kClosed = 1u << 31;
  std::atomic<std::uint32_t> users{0};
};

struct Work::State {
  // User-provided, so that make_shared's value-initialization runs the
  // member initializers below and does not first zero the whole state (a
  // `rep stos` of its ~230 bytes on every nonblocking call).
  State() noexcept {}
  // Set once, by finish() (after `error` and `source`); read without a lock.
  std::atomic<bool> done{false};
  // Set by a thread before it sleeps until `done` or leaves a callback, each
  // under the state's stripe (waiting_stripe()): only then does finish()
  // take that stripe's mutex and notify. A small call's finish() is then
  // one locked instruction (the store of `done`), where a mutex and
  // condition variable of its own cost three (lock, unlock, the condition
  // variable's destruction), each 6 ns or more here, on every nonblocking
  // call.
  std::atomic<bool> watched{false};
  std::optional<Error> error;
  int source = -1;  // a receive's sender, set before finish()
  std::vector<std::function<void()>> on_complete;  // under the stripe's mutex; run once, by finish()
  // A queued collective's engine: Work::wait() runs the call itself if no
  // thread has taken it yet. Null for point-to-point work. Owned (it
  // outlives a destroyed engine, closed): a weak reference cost two more
  // locked instructions a wait.
  std::shared_ptr<QueueAccess> queue_access;
  // A deferred call (CallOptions::deferred) the worker leaves alone for
  // kDeferredGrace from `deferred_since` (the engine's call_clock ticks at
  // its submit; 0: it may start at once; under the engine's queue_mutex);
  // `deferred` is cleared by the first test() or wait() that makes it
  // start at once (expedite()).
  std::uint64_t deferred_since = 0;
  std::atomic<bool> deferred{false};
  // A deferred call parked in the engine's hand-off slot (Communicator::
  // Impl::handoff) instead of its queue: the call, and the state's own
  // reference to itself, which keeps it while parked (the caller may drop
  // its Work). Both are moved out by the thread that takes it from the slot.
  std::optional<core::Call> parked_call;
  std::shared_ptr<State> parked_self;
  void finish(std::optional<Error> e);
};

// Where threads sleep until a state is done (Work::wait) and leave its
// callbacks: one of a few mutexes and condition variables the process's
// states share by address, so that a state has none of its own to make
// and destroy on every call. A notify wakes the stripe's other sleepers
// too; they look at their own state and sleep again.
struct WaitingStripe {
  std::mutex mutex;
  std::condition_variable cv;
};
WaitingStripe& waiting_stripe(const Work::State* state);

// A forced algorithm name per collective kind ("" for automatic).
using AlgorithmNames = std::array<std::string, coll::kCollectiveKinds>;

struct Communicator::Impl {
  // Creates the communicator over a connected transport and measures the
  // cost model (collective: every rank at once). `store` is kept for the
  // communicator's life when this rank serves it.
  // A communicator split from another of the same size (dup) passes the
  // parent's `inherited` cost model (same transport, same hosts, same p: the
  // probe's timings hold); then there is no probe. Any split keeps the log
  // labelling lines with the process's rank in the parent.
  Impl(std::unique_ptr<transport::Transport> transport, std::shared_ptr<bootstrap::Store> store,
       const Options& options, const coll::CostModel* inherited = nullptr, bool split = false);
  ~Impl();

  // A checked call with its algorithm chosen (invalid arguments throw
  // Error(invalid_argument)).
  core::Call make_call(coll::CollectiveKind kind, const core::CallArgs& args,
                       const CallOptions& options);
  // What runs a call of `kind` and `bytes` (as coll::choice_bytes counts
  // them) when the call asks for `requested` ("" or "auto": nothing):
  // CHORUS_ALGO, else the call's, else the communicator's choice.
  coll::AlgorithmChoice choose(coll::CollectiveKind kind, std::string_view requested,
                               std::size_t bytes) const;
  void submit(core::Call call);  // runs it now, in order
  Work submit_async(core::Call call);
  // Point-to-point (core/point_to_point.cpp): posts at once, beside the
  // collectives; the worker thread progresses and ends them. `peer` of a
  // receive may be Communicator::kAnySource. Arguments are checked by the
  // caller (the shims).
  Work post_send(const void* buffer, std::size_t bytes, int peer, std::uint32_t tag);
  Work post_receive(void* buffer, std::size_t bytes, int peer, std::uint32_t tag);
  void abort(const std::string& reason);
  std::optional<Error> error() const;
  Counters counters() const;
  const coll::CostModel& cost_model() const { return selector->model(); }
  // Deferred calls whose submit notified the worker's condition variable
  // (tests: only the first of a run of them should).
  std::uint64_t deferred_calls_that_woke_the_worker() const { return deferred_wakes.load(); }
  const std::string& cost_model_origin() const { return cost_model_source; }

  std::shared_ptr<bootstrap::Store> store;  // outlives the transport
  std::unique_ptr<transport::Transport> transport;
  // When every rank is on this host: the memory they share (shm/segment.hpp);
  // null otherwise, or with CHORUS_SHM=0.
  std::unique_ptr<shm::Segment> host;
  // Which ranks share a host (found at creation, or CHORUS_TOPOLOGY).
  std::optional<coll::Topology> topology;
  // When the ranks are on several hosts: the memory this rank's host's
  // ranks share (small AllReduces across hosts, coll/shared_memory.hpp);
  // null otherwise, or with CHORUS_SHM=0, or when any host has none.
  std::unique_ptr<shm::Segment> own_host;
  double timeout_seconds;
  Options options;  // as resolved: timeout set, algorithms as given (not CHORUS_ALGO)

 private:
  friend struct QueueAccess;  // a waiter running its queued call (run_queued_next())
  // Runs one call on the transport; throws (and poisons) on error.
  // Numbers the call (its sequence) under run_mutex.
  void run(core::Call& call);
  void run_locked(core::Call& call);  // the same, with run_mutex held
  // With run_mutex held: runs the call parked in the hand-off slot, if one
  // is, and returns its state and outcome, for the caller to finish once
  // it has released run_mutex (a state's callbacks may make calls). Every
  // run() does it first: a parked call is older than any call run after it
  // is parked.
  struct HandedOff {
    std::shared_ptr<Work::State> state;
    std::optional<Error> error;
    void finish() { state->finish(std::move(error)); }
  };
  std::optional<HandedOff> run_handed_off();
  bool handoff_due() const;  // the worker's to take: expedited, or kDeferredGrace old
  // Parks `call` (deferred, of `state`, submitted at `now`) in the hand-off
  // slot when nothing is queued or running there and the slot is empty;
  // false (nothing moved) otherwise.
  bool park(const std::shared_ptr<Work::State>& state, core::Call& call, std::uint64_t now);
  // The algorithm with the call check beside it (by messages or through
  // the host segment), for the rows that do not carry it themselves.
  void run_checked(coll::Collective& c, const core::Call& call);
  // A call that threw `e`: poisons the communicator, tells the peers (the
  // host segments' abort notices, the transport) and throws the error that
  // names the call.
  [[noreturn]] void fail_call(const core::Call& call, const std::exception& e);
  Error poisoned_error() const;  // "unusable after an earlier error: <the first>"
  void worker_loop();
  void start_worker();  // under queue_mutex
  // The time since `ticks` of call_clock (a deferred call's submit): the
  // submit reads the time-stamp counter, 10 ns here, where steady_clock
  // costs 30 on every nonblocking call through libchorus_pmpi; the worker
  // converts.
  std::chrono::duration<double> time_since(std::uint64_t ticks) const;
  // On the calling thread, a Work::wait() of `wait_seconds`: runs
  // `target`'s call when it is next in the queue, no thread (the worker,
  // another waiter) is running queued calls, and the wait is at least the
  // communicator's timeout (which bounds the call) or comes with a
  // `progress` hook (Work::wait_progressing(): set as the thread's wait
  // hook while the call runs, common/wait_hook.hpp); true if it did. A
  // call waited for right after it was queued then costs what a blocking
  // one does, not a hand-off to the worker and back (4-13 us at 8 B here,
  // docs/performance.md "Eleventh pass").
  bool run_queued_next(const Work::State* target, double wait_seconds,
                       const std::function<void()>* progress);
  void expedite(Work::State* target);  // QueueAccess::expedite()
  // With queue_mutex held (`lock`) and no thread running queued calls:
  // runs the front call on this thread (worker_busy meanwhile), finishes
  // its state with the outcome, and returns with the lock held again.
  void run_front(std::unique_lock<std::mutex>& lock);

  // A posted send or receive; `request` is null while a receive from any
  // source has not found its sender yet.
  struct PointToPoint {
    transport::RequestPtr request;
    std::shared_ptr<Work::State> state;
    bool is_send = false;
    int peer = 0;  // kAnySource until found
    std::uint32_t tag = 0;
    void* buffer = nullptr;
    std::size_t bytes = 0;
    transport::Deadline deadline;
  };
  // One pass over the pending ones, under run_mutex: progress, find any
  // source's senders, move what has ended to `ended` (a failure poisons).
  // The caller finishes those after releasing run_mutex: their callbacks
  // (a framework's futures) may post more. Returns how many are pending.
  using EndedWork = std::vector<std::pair<std::shared_ptr<Work::State>, std::optional<Error>>>;
  std::size_t progress_point_to_point(bool stopping, EndedWork& ended);
  Work post_point_to_point(bool is_send, void* buffer, std::size_t bytes, int peer,
                           std::uint32_t tag);
  std::string describe(const PointToPoint& message) const;
  std::vector<PointToPoint> point_to_point;  // under run_mutex
  std::atomic<std::size_t> point_to_point_pending{0};
  int any_source_next = 0;  // where the next search for a sender starts
  std::string describe(const core::Call& call) const;
  void log_choice(const core::Call& call, const coll::AlgorithmChoice& choice);

  AlgorithmNames forced_by_env;   // CHORUS_ALGO: calls cannot override these
  AlgorithmNames communicator_choice;  // Options::algorithm(s)
  bool check_calls = true;        // CHORUS_CHECK: run the call check beside every call
  std::unique_ptr<coll::Selector> selector;
  // Where the cost model came from (the INFO line, cost_model_origin()):
  // "probe, N ms", "probed before in this process", "no probe: every rank
  // had a model" (some from their tuning files) or "parent communicator";
  // after "tuning file; " where this rank's tuning file's model replaced it.
  std::string cost_model_source;
  // The last automatic choice of each collective: its size in the upper 56
  // bits, the chosen row's id in the low 8 (0: none yet). One word, so that
  // threads making calls at once read a whole entry, never half of two.
  static constexpr std::size_t kChoiceMemoBytesLimit = std::size_t{1} << 56;
  std::array<std::atomic<std::uint64_t>, coll::kCollectiveKinds> last_automatic_choice{};

  // Order: async calls queue for the worker thread; a blocking call waits
  // for the queue to drain and runs on the caller's thread; run() numbers
  // each call under run_mutex, in the order they run (one lock a call).
  std::uint64_t next_sequence = 1;  // under run_mutex; 0 is the probe's; 64 bits: the host segment never sees one twice
  std::mutex queue_mutex;
  std::condition_variable queue_cv;     // the worker waits on it
  std::condition_variable drained_cv;   // submit() waits on it: queue empty, worker idle
  std::deque<std::pair<core::Call, std::shared_ptr<Work::State>>> queue;
  std::atomic<std::size_t> queued{0};  // queue.size(), for the worker's spin and submit()
  // A thread (the worker, or a waiter in run_queued_next()) is running
  // dequeued calls; only one at a time does, so they run in queue order.
  // Written under queue_mutex; submit() reads it without.
  std::atomic<bool> worker_busy{false};
  // The hand-off slot: one deferred call submitted while nothing was queued
  // or running, for its waiter to run on its own thread (run_queued_next())
  // without the queue's mutex: a nonblocking call waited for at once (an
  // MPI_Ixxx and its MPI_Wait through libchorus_pmpi) then takes no lock
  // but the run lock, which its thread holds biased. Taken (compare-and-
  // swap to null) only with run_mutex held, or by abort(); the worker takes
  // it kDeferredGrace after `handoff_since` (the call_clock ticks of its
  // submit), or at once once `handoff_expedited`. Calls queued meanwhile
  // are younger, and run after it: every run() empties the slot first.
  std::atomic<Work::State*> handoff{nullptr};
  std::atomic<std::uint64_t> handoff_since{0};
  std::atomic<bool> handoff_expedited{false};
  std::atomic<bool> worker_started{false};  // set once, under queue_mutex
  // The worker is in (or about to enter) its wait that only a notify ends:
  // a call parked meanwhile wakes it (Dekker with `handoff`, both
  // sequentially consistent), so that its 1 ms limit holds.
  std::atomic<bool> worker_sleeps{false};
  std::shared_ptr<QueueAccess> queue_access = std::make_shared<QueueAccess>(this);
  bool stopping = false;
  // Deferred calls (CallOptions::deferred), under queue_mutex: when the last
  // was queued, and whether the worker will look at the queue without being
  // woken (it spins, or sleeps only until its next look): then their submit
  // need not wake it.
  std::uint64_t last_deferred = 0;  // call_clock ticks; 0: none yet
  bool worker_polls = false;
  // A submit has notified the worker, which has not waited since: later
  // submits need not (under queue_mutex). Woken but not yet run (ranks on
  // every core), the worker was notified by every submit, each a system
  // call. `submitted` counts the submits; each of the worker's waits ends
  // at one it was notified of.
  bool worker_notified = false;
  std::uint64_t submitted = 0;
  std::atomic<std::uint64_t> deferred_wakes{0};  // deferred_calls_that_woke_the_worker()
  std::thread worker;
  // Held while a call uses the transport (and scratch): common/biased_lock.hpp.
  BiasedLock run_mutex;
  coll::Scratch scratch;  // the algorithms' temporary buffers, kept between calls

  mutable std::mutex error_mutex;
  std::optional<Error> first_error;
  std::atomic<bool> poisoned{false};
  std::atomic<bool> abort_requested{false};

  // Counted without a lock, on every call's path: written under run_mutex
  // only; a reader may see a call half counted (calls but not yet its
  // bytes), never a torn number.
  struct Count {
    std::atomic<std::uint64_t> calls{0}, bytes{0}, ticks{0};  // ticks: of call_clock
    void add(std::uint64_t call_bytes, std::uint64_t call_ticks) noexcept;
    Counters::Entry read(const TickClock& clock) const noexcept;
  };
  TickClock call_clock;  // times each call for the counters
  Count total_count;
  std::array<Count, kAlgorithmCount> count_by_algorithm;
  // (kind, size class, algorithm) already logged at INFO; under log_mutex.
  std::mutex log_mutex;
  std::set<std::tuple<int, int, int>> logged_choices;
};

// The library's and its tools' way to the engine (the public header only
// declares it a friend).
struct CommunicatorAccess {
  static Communicator make(std::unique_ptr<Communicator::Impl> impl) {
    return Communicator(std::move(impl));
  }
  static Communicator::Impl& engine(Communicator& comm) { return *comm.impl_; }
  static const Communicator::Impl& engine(const Communicator& comm) { return *comm.impl_; }
};

// A communicator over a connected transport (tests: over in-process ones).
Communicator make_communicator(std::unique_ptr<transport::Transport> transport,
                               std::shared_ptr<bootstrap::Store> store, const Options& options);

}  // namespace chorus
