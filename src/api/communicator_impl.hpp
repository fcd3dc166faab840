// The inside of a Communicator: its transport, how calls are ordered and run,
// and its failure state. Tests build communicators over in-process
// transports through make_communicator().
#pragma once

#include <chorus/communicator.hpp>

#include "bootstrap/store.hpp"
#include "coll/call_check.hpp"
#include "coll/collectives.hpp"
#include "coll/selector.hpp"
#include "transport/transport.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

namespace chorus {

struct Work::State {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::optional<Error> error;
  void finish(std::optional<Error> e);
};

// One collective call, as this rank made it.
struct Call {
  coll::CollectiveKind kind = coll::CollectiveKind::allreduce;
  coll::CallSignature signature;
  coll::Variant variant;  // allreduce only
  std::uint32_t sequence;
  const void* send;
  void* recv;
  std::size_t count;
  DataType type;
  ReduceOp op;
  int root = -1;  // rooted collectives
  // The v-forms' blocks (copied: an async call must not depend on the
  // caller's arrays); gatherv's and scatterv's only at the root.
  coll::BlockLayout send_blocks, recv_blocks;
};

// What a collective call was given; which fields matter depends on the
// kind (include/chorus/communicator.hpp). `count`: the uniform forms' count
// per rank, gatherv's send count, scatterv's recv count.
struct CallArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  DataType type = DataType::float32;
  ReduceOp op = ReduceOp::sum;
  int root = -1;
  std::span<const std::size_t> send_counts{}, send_displs{}, recv_counts{}, recv_displs{};
};

struct Communicator::Impl {
  // Creates the communicator over a connected transport and measures the
  // cost model (collective: every rank at once). `store` is kept for the
  // communicator's life when this rank serves it.
  // A communicator split from another of the same size (dup) passes the
  // parent's `inherited` cost model (same transport, same hosts, same p: the
  // probe's timings hold); then there is no probe. Any split keeps the log
  // labelling lines with the process's rank in the parent.
  Impl(std::unique_ptr<transport::Transport> transport, std::unique_ptr<bootstrap::Store> store,
       const Options& options, const coll::CostModel* inherited = nullptr, bool split = false);
  ~Impl();

  void submit(const Call& call);  // runs it now, in order
  Work submit_async(const Call& call);
  // A checked call (invalid arguments throw Error(invalid_argument)).
  Call make_allreduce(const void* send, void* recv, std::size_t count, DataType type,
                      ReduceOp op, const CallOptions& options);
  // Any other collective.
  Call make_call(coll::CollectiveKind kind, const CallArgs& args, const CallOptions& options);
  // What runs an allreduce of `bytes` when the call asks for `requested`:
  // CHORUS_ALGO, else the call's algorithm, else the communicator's.
  coll::Choice choose(Algorithm requested, std::size_t bytes) const;
  void abort(const std::string& reason);

  // Runs one call on the transport; throws (and poisons) on error.
  void run(const Call& call);
  static void run_algorithm(const coll::Collective& c, const Call& call);
  Error poisoned_error() const;  // "unusable after an earlier error: <the first>"
  [[noreturn]] void throw_poisoned() const;
  void worker_loop();
  void wait_for_queue_drain(std::unique_lock<std::mutex>& queue_lock);
  std::string describe(const Call& call) const;

  std::unique_ptr<bootstrap::Store> store;  // outlives the transport
  std::unique_ptr<transport::Transport> transport;
  double timeout_seconds;
  Algorithm algorithm;  // the communicator's default, CHORUS_ALGO applied
  bool forced_by_env = false;  // CHORUS_ALGO named an algorithm: calls cannot override it
  bool check_calls = true;     // CHORUS_CHECK: run the call check beside every call
  std::unique_ptr<coll::Selector> selector;

  // Order: sequence numbers are handed out under submit_mutex, in call
  // order; async calls queue for the worker thread; a blocking call waits
  // for the queue to drain and runs on the caller's thread.
  std::mutex submit_mutex;
  std::uint32_t next_sequence = 1;  // 0 is the probe's
  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::deque<std::pair<Call, std::shared_ptr<Work::State>>> queue;
  bool worker_busy = false, stopping = false;
  std::thread worker;
  std::mutex run_mutex;  // held while a call uses the transport (and scratch)
  coll::Scratch scratch;  // the algorithms' temporary buffers, kept between calls

  mutable std::mutex error_mutex;
  std::optional<Error> first_error;
  std::atomic<bool> poisoned{false};
  std::atomic<bool> abort_requested{false};
  bool transport_aborted = false;  // under run_mutex

  mutable std::mutex counters_mutex;
  Counters counters;
  std::set<std::pair<int, coll::Variant>> logged_choices;  // under submit_mutex
};

Communicator make_communicator(std::unique_ptr<transport::Transport> transport,
                               std::unique_ptr<bootstrap::Store> store, const Options& options);

}  // namespace chorus
