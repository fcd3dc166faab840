// A communicator: the ranks of one job, connected, and the collectives they
// run together.
//
// Contract:
//  - Every rank makes the same collective calls in the same order (as in
//    MPI). Ranks that do not (another collective, count, dtype, op or forced
//    algorithm) all get an Error of kind mismatched_collective that says
//    what differed; none returns a result.
//  - Blocking calls return when this rank's output is final. Async calls
//    return a Work at once; their buffers must stay untouched until it
//    completes. Calls (blocking or not) run in the order they were made.
//  - Every wait has a deadline (Options::timeout, else CHORUS_TIMEOUT,
//    default 300 s). A dead peer fails the call within seconds.
//  - After any error in a collective the communicator is poisoned: later
//    calls fail at once with that first error. abort() ends pending work.
//  - Invalid arguments throw Error(invalid_argument) before anything is
//    sent, and do not poison.
//  - One thread at a time should call a communicator's collectives (calls
//    from several threads are serialized, but their order is then a race).
#pragma once

#include <chorus/algorithm.hpp>
#include <chorus/error.hpp>
#include <chorus/export.hpp>
#include <chorus/types.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace chorus {

struct Options {
  // How collectives of this communicator pick their algorithm unless a call
  // says otherwise. CHORUS_ALGO, when it names one, overrides both.
  // `algorithm`: AllReduce's; `algorithms`: any collective's, in CHORUS_ALGO's
  // form ("allgather=bruck,reduce=binomial_tree,allreduce=ring"; names in
  // docs/tuning.md); an entry there wins over `algorithm`.
  Algorithm algorithm = Algorithm::automatic;
  // Deadline of every wait; CHORUS_TIMEOUT (seconds) when unset.
  std::optional<std::chrono::duration<double>> timeout;
  // "auto", "ucx", "tcp"; CHORUS_TRANSPORT when empty. Every rank must ask
  // for the same: creation fails on all (mismatched_collective) otherwise.
  std::string transport;
  std::string algorithms;  // see `algorithm` above
};

struct CallOptions {
  // `comm.allreduce(..., {Algorithm::ring})`, `{Algorithm::automatic, "bruck"}`.
  CallOptions(Algorithm algorithm = Algorithm::automatic, std::string algorithm_name = {})
      : algorithm(algorithm), algorithm_name(std::move(algorithm_name)) {}

  Algorithm algorithm;  // AllReduce's; automatic: the communicator's choice
  // Any collective's algorithm by name ("bruck" for allgather; docs/tuning.md);
  // empty: `algorithm`. An unknown name, or one that cannot run on this
  // communicator's ranks, is Error(invalid_argument).
  std::string algorithm_name;
  // An async call that its caller will soon wait for with
  // Work::wait_progressing(), which then runs it on the waiting thread (an
  // MPI library's MPI_Wait): Chorus's worker thread is not woken for it and
  // leaves it alone for 1 ms, unless a test() or another wait on it comes
  // first. Where ranks outnumber cores, a worker woken for every call took
  // the cores the ranks needed (a 1 KiB MPI_Ibcast through libchorus_pmpi
  // at p = 4 on 2 cores: 1.5-2.5x the time). Blocking calls ignore it.
  bool deferred = false;
};

// The handle of an async collective.
class CHORUS_API Work {
 public:
  Work();
  ~Work();
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;

  // True once the collective has ended, well or not; never blocks or throws.
  // A deferred call (CallOptions::deferred) that is tested starts on the
  // worker at once.
  bool test() const;
  // Blocks until the collective ends or `timeout` passes; returns whether it
  // ended. Throws its Error if it failed. A wait of at least the
  // communicator's timeout (Options::timeout, which bounds every call) on a
  // call no thread has started, next in the queue, runs it on this thread
  // instead of handing it to Chorus's worker and back.
  bool wait(std::chrono::duration<double> timeout = std::chrono::hours(24 * 365));
  // Blocks until the collective ends, calling `progress` meanwhile: for a
  // caller with a progress engine of its own that must keep moving while
  // this thread waits (an MPI library's MPI_Wait: a peer may need one of
  // the program's other requests before it reaches this collective).
  // Throws its Error if it failed. A call no thread has started, next in
  // the queue, runs on this thread, and every wait inside it that lasts
  // calls `progress` every 20 us while it spins, and at least every 200 us
  // while it sleeps; otherwise this thread calls it every 200 us while Chorus's
  // worker runs the call. `progress` must not call this communicator.
  void wait_progressing(const std::function<void()>& progress);
  // The error it ended with, once it has ended badly.
  std::optional<Error> error() const;
  // For a receive (recv_async), the rank its message came from once it has
  // ended well (what a receive from kAnySource needs); -1 otherwise.
  int source() const;
  // Runs `callback` once the work has ended, well or not: at once on this
  // thread if it has, else on the thread that ends it (Chorus's worker, or
  // a thread whose wait() runs the call), so it must be short and must not
  // call this communicator or wait. What
  // frameworks build futures on (the PyTorch backend marks its Future here).
  void on_complete(std::function<void()> callback);

  struct State;
  explicit Work(std::shared_ptr<State> state);

 private:
  void expedite() const;
  std::shared_ptr<State> state_;
};

// Time spent in collectives, by algorithm: the first question when training
// is slow is whether AllReduce dominates the step.
struct Counters {
  struct Entry {
    std::uint64_t calls = 0;
    std::uint64_t bytes = 0;  // payload bytes (count * size of dtype), per call summed
    double seconds = 0;       // from the start of each call's run to its end
  };
  Entry total;
  std::array<Entry, kAlgorithmCount> by_algorithm{};  // index: Algorithm
};

class CHORUS_API Communicator {
 public:
  // Rank, size and store from the environment (CHORUS_RANK/SIZE/STORE, or
  // torchrun's, Open MPI's, PMI's or Slurm's variables; docs/tuning.md).
  static Communicator from_env(const Options& options = {});
  // Explicit: this process is `rank` of `size`, meeting at `store`
  // ("tcp://host:port", served by rank 0, or "file:///shared/dir").
  static Communicator connect(int rank, int size, const std::string& store,
                              const Options& options = {});

  // Bootstrap through the caller's own collective (MPI, a framework's
  // process group) instead of a store. Every rank calls `allgather` at the
  // same time with `bytes` bytes at `send` (the same `bytes` on every rank);
  // it must fill `recv` with size * bytes bytes, rank r's at r * bytes, or
  // throw. connect() calls it a few times, in the same order on every rank.
  using Allgather = std::function<void(const void* send, std::size_t bytes, void* recv)>;
  static Communicator connect(int rank, int size, const Allgather& allgather,
                              const Options& options = {});

  // Bootstrap through a framework's key-value store (torch.distributed's
  // c10d::Store, say) instead of a store of Chorus's own. Chorus's keys
  // begin with "chorus/", the same for every communicator: give each its
  // own store or prefix (as torch does for each group). Up to 64 ranks
  // every rank reads every rank's address at connect(); beyond, a rank
  // reads only the addresses of the peers it talks to, when it first talks
  // to them (docs/architecture.md), so the store is then used after
  // connect() returns, from Chorus's own thread, for as long as the
  // communicator lives: the functions must stay valid and may be called
  // from any thread (one call at a time).
  struct KeyValueStore {
    // Stores `value` under `key`.
    std::function<void(const std::string& key, std::span<const std::byte> value)> set;
    // The value of `key` once it exists, waiting at most `timeout`; throws
    // when it does not appear by then.
    std::function<std::vector<std::byte>(const std::string& key, std::chrono::milliseconds timeout)>
        get;
    // Adds `delta` to the integer at `key` (0 when absent); the new value.
    std::function<std::int64_t(const std::string& key, std::int64_t delta)> add;
    // Whether `key` exists now, without waiting (for errors that name the
    // ranks that never came).
    std::function<bool(const std::string& key)> has;
  };
  static Communicator connect(int rank, int size, KeyValueStore store,
                              const Options& options = {});

  // From an MPI communicator: the ranks of `comm`, bootstrapped with its
  // own all-gather (no store, no environment variables). Collective over
  // `comm`; Chorus's traffic then runs on Chorus's transport, not MPI's.
  // Defined in libchorus_mpi (CMake target chorus::mpi, header
  // <chorus/mpi.hpp>), so that libchorus never depends on MPI; MpiComm is
  // MPI_Comm.
  template <class MpiComm>
  static Communicator from_mpi(MpiComm comm, const Options& options = {});

  // ---- Sub-communicators (collective over this communicator) ----
  // Ranks passing the same color form a new communicator, ranked by key
  // (ties: by rank here), like MPI_Comm_split and ncclCommSplit; kNoColor
  // joins none (nullopt). The new one has its own connections (made through
  // this communicator's collectives, not the store), sequence numbers and
  // worker, so collectives on parent and children may run at the same time
  // from different threads without mixing. It inherits the timeout and
  // algorithm settings. A rank that cannot connect fails split() on every
  // member of its group, naming it.
  static constexpr int kNoColor = -1;
  std::optional<Communicator> split(int color, int key);
  // Same ranks, same order, a communicator of its own (MPI_Comm_dup).
  Communicator dup();

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  // Finishes this rank's pending work, then closes its connections.
  ~Communicator();

  int rank() const;
  int size() const;
  // "ucx", "tcp" or "local".
  std::string_view transport_name() const;

  // recv = op over all ranks of send; send == recv means in place.
  void allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                 const CallOptions& options = {});
  Work allreduce_async(const void* send, void* recv, std::size_t count, DataType type,
                       ReduceOp op, const CallOptions& options = {});

  template <class T>
  void allreduce(std::span<const T> send, std::span<T> recv, ReduceOp op,
                 const CallOptions& options = {}) {
    check_spans(send.size(), recv.size());
    allreduce(send.data(), recv.data(), send.size(), datatype_of_v<T>, op, options);
  }
  template <class T>
  void allreduce(std::span<T> buffer, ReduceOp op, const CallOptions& options = {}) {
    allreduce(buffer.data(), buffer.data(), buffer.size(), datatype_of_v<T>, op, options);
  }
  template <class T>
  Work allreduce_async(std::span<const T> send, std::span<T> recv, ReduceOp op,
                       const CallOptions& options = {}) {
    check_spans(send.size(), recv.size());
    return allreduce_async(send.data(), recv.data(), send.size(), datatype_of_v<T>, op, options);
  }
  template <class T>
  Work allreduce_async(std::span<T> buffer, ReduceOp op, const CallOptions& options = {}) {
    return allreduce_async(buffer.data(), buffer.data(), buffer.size(), datatype_of_v<T>, op,
                           options);
  }

  // ---- The other collectives (MPI semantics; blocking and async forms) ----
  // Calls on one communicator run in call order, whatever their kind; a rank
  // calling another collective than its peers gets mismatched_collective.
  // The algorithm is Chorus's choice: CallOptions::algorithm and CHORUS_ALGO
  // apply to allreduce only, and any other value is invalid_argument here.

  // Root's `count` elements into every rank's `buffer`.
  void broadcast(void* buffer, std::size_t count, DataType type, int root,
                 const CallOptions& options = {});
  Work broadcast_async(void* buffer, std::size_t count, DataType type, int root,
                       const CallOptions& options = {});

  // recv (significant at root only; may be null elsewhere) = op over all
  // ranks of send. send == recv at root is in place.
  void reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
              int root, const CallOptions& options = {});
  Work reduce_async(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                    int root, const CallOptions& options = {});

  // recv (size() blocks of count) gets rank j's send in block j. In place
  // when send == recv + rank() * count elements (as NCCL and MPI_IN_PLACE).
  void allgather(const void* send, void* recv, std::size_t count, DataType type,
                 const CallOptions& options = {});
  Work allgather_async(const void* send, void* recv, std::size_t count, DataType type,
                       const CallOptions& options = {});

  // ---- v-forms: per-rank counts and displacements (in elements) ----
  // counts and displs have size() entries; empty displs mean blocks back to
  // back in rank order. They are copied: async calls do not keep them.

  // recv's block j (counts[j] elements at displs[j]) gets rank j's send of
  // counts[rank()] elements. Every rank passes the same counts (checked).
  // In place when send == recv + displs[rank()] elements.
  void allgatherv(const void* send, void* recv, std::span<const std::size_t> counts,
                  std::span<const std::size_t> displs, DataType type,
                  const CallOptions& options = {});
  Work allgatherv_async(const void* send, void* recv, std::span<const std::size_t> counts,
                        std::span<const std::size_t> displs, DataType type,
                        const CallOptions& options = {});

  // send holds size() blocks of count; recv (count elements) gets block
  // rank() reduced over all ranks (MPI_Reduce_scatter_block). In place when
  // recv == send + rank() * count elements.
  void reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                      ReduceOp op, const CallOptions& options = {});
  Work reduce_scatter_async(const void* send, void* recv, std::size_t count, DataType type,
                            ReduceOp op, const CallOptions& options = {});

  // send holds size() blocks back to back, counts[j] elements each; recv
  // (counts[rank()] elements) gets block rank() reduced over all ranks
  // (MPI_Reduce_scatter). Every rank passes the same counts (checked). In
  // place when recv is this rank's block of send.
  void reduce_scatter_v(const void* send, void* recv, std::span<const std::size_t> counts,
                        DataType type, ReduceOp op, const CallOptions& options = {});
  Work reduce_scatter_v_async(const void* send, void* recv, std::span<const std::size_t> counts,
                              DataType type, ReduceOp op, const CallOptions& options = {});

  // Block j (count elements) of send goes to rank j, into block rank() of
  // its recv. send and recv must not overlap.
  void alltoall(const void* send, void* recv, std::size_t count, DataType type,
                const CallOptions& options = {});
  Work alltoall_async(const void* send, void* recv, std::size_t count, DataType type,
                      const CallOptions& options = {});

  // send's block j (send_counts[j] at send_displs[j]) goes to rank j, into
  // its recv's block rank(); recv_counts[j] must equal what rank j sends
  // here (a shorter message is mismatched_collective on the receiver, a
  // longer one a truncation error). send and recv must not overlap.
  void alltoallv(const void* send, std::span<const std::size_t> send_counts,
                 std::span<const std::size_t> send_displs, void* recv,
                 std::span<const std::size_t> recv_counts,
                 std::span<const std::size_t> recv_displs, DataType type,
                 const CallOptions& options = {});
  Work alltoallv_async(const void* send, std::span<const std::size_t> send_counts,
                       std::span<const std::size_t> send_displs, void* recv,
                       std::span<const std::size_t> recv_counts,
                       std::span<const std::size_t> recv_displs, DataType type,
                       const CallOptions& options = {});

  // The root's recv (size() blocks of count; ignored elsewhere, may be null)
  // gets rank j's send in block j. In place at the root when send == recv +
  // root * count elements.
  void gather(const void* send, void* recv, std::size_t count, DataType type, int root,
              const CallOptions& options = {});
  Work gather_async(const void* send, void* recv, std::size_t count, DataType type, int root,
                    const CallOptions& options = {});
  // Rank j sends send_count elements; the root's recv gets them as block j
  // (recv_counts[j] at recv_displs[j]; both significant at the root only).
  void gatherv(const void* send, std::size_t send_count, void* recv,
               std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
               DataType type, int root, const CallOptions& options = {});
  Work gatherv_async(const void* send, std::size_t send_count, void* recv,
                     std::span<const std::size_t> recv_counts,
                     std::span<const std::size_t> recv_displs, DataType type, int root,
                     const CallOptions& options = {});

  // Block j (count elements) of the root's send (ignored elsewhere, may be
  // null) goes to rank j's recv. In place at the root when recv == send +
  // root * count elements.
  void scatter(const void* send, void* recv, std::size_t count, DataType type, int root,
               const CallOptions& options = {});
  Work scatter_async(const void* send, void* recv, std::size_t count, DataType type, int root,
                     const CallOptions& options = {});
  // Block j of the root's send (send_counts[j] at send_displs[j]; both
  // significant at the root only) goes to rank j's recv of recv_count.
  void scatterv(const void* send, std::span<const std::size_t> send_counts,
                std::span<const std::size_t> send_displs, void* recv, std::size_t recv_count,
                DataType type, int root, const CallOptions& options = {});
  Work scatterv_async(const void* send, std::span<const std::size_t> send_counts,
                      std::span<const std::size_t> send_displs, void* recv,
                      std::size_t recv_count, DataType type, int root,
                      const CallOptions& options = {});

  // Returns once every rank has called it.
  void barrier(const CallOptions& options = {});
  Work barrier_async(const CallOptions& options = {});

  // ---- Point-to-point: tagged messages between two ranks ----
  // They run beside the collectives, not in their order (a send never
  // waits for an earlier collective to finish, nor they for it), and never
  // match a collective's messages. Messages from one rank to another with
  // one tag arrive in the order they were sent. A send ends when its buffer
  // may be reused; a receive when a message of exactly `count` elements has
  // arrived (any other size is an Error naming both sizes). Failure is as
  // for collectives: a dead peer or the deadline (Options::timeout) fails
  // the call with an Error naming the peer and tag, and poisons the
  // communicator; abort() ends pending ones. Progress is Chorus's own
  // (a background thread), so a send completes whether or not the caller
  // waits on it.
  static constexpr int kAnySource = -1;
  void send(const void* buffer, std::size_t count, DataType type, int peer, std::uint32_t tag = 0);
  Work send_async(const void* buffer, std::size_t count, DataType type, int peer,
                  std::uint32_t tag = 0);
  // `peer` may be kAnySource; returns the rank the message came from.
  int recv(void* buffer, std::size_t count, DataType type, int peer, std::uint32_t tag = 0);
  Work recv_async(void* buffer, std::size_t count, DataType type, int peer,
                  std::uint32_t tag = 0);

  // Ends all pending and queued work with an error on this rank, tells the
  // peers where the transport can, and poisons the communicator.
  void abort(const std::string& reason = "aborted by the application");
  // The first error, once poisoned.
  std::optional<Error> error() const;

  Counters counters() const;

  struct Impl;  // the engine: src/core/engine.hpp, not installed

 private:
  friend struct CommunicatorAccess;  // the library's own way in (src/core/engine.hpp)
  explicit Communicator(std::unique_ptr<Impl> impl);
  static void check_spans(std::size_t send, std::size_t recv);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
