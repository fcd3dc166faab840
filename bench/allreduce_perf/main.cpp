// allreduce_perf (and allgather_perf, broadcast_perf, reduce_perf,
// reduce_scatter_perf, alltoall_perf: the same binary under other names):
// a Chorus collective measured the way nccl-tests measures NCCL, optionally
// beside the matching MPI collective in the same run. See options.cpp
// (usage) and docs/allreduce_perf.md.
#include "local_launch.hpp"
#include "options.hpp"
#include "report.hpp"
#include "verify.hpp"

#include "core/engine.hpp"

#include <chorus/chorus.hpp>
#include <fmt/format.h>
#include <unistd.h>

#if defined(CHORUS_PERF_WITH_MPI)
#include <mpi.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <span>

namespace chorus::perf {
namespace {

using Clock = std::chrono::steady_clock;

// A page-aligned buffer of `bytes`, starting `shift` bytes past the page.
class Buffer {
 public:
  Buffer(std::size_t bytes, std::size_t shift)
      : storage_(static_cast<std::byte*>(std::aligned_alloc(4096, round_up(bytes + shift)))),
        data_(storage_.get() + shift) {
    if (!storage_) throw std::bad_alloc();
    std::memset(storage_.get(), 0, round_up(bytes + shift));
  }
  std::byte* data() { return data_; }

 private:
  static std::size_t round_up(std::size_t n) { return (n + 4095) / 4096 * 4096 + 4096; }
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> storage_;
  std::byte* data_;
};

#if defined(CHORUS_PERF_WITH_MPI)
MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::int8: return MPI_INT8_T;
    case DataType::uint8: return MPI_UINT8_T;
    case DataType::int32: return MPI_INT32_T;
    case DataType::uint32: return MPI_UINT32_T;
    case DataType::int64: return MPI_INT64_T;
    case DataType::uint64: return MPI_UINT64_T;
    case DataType::float32: return MPI_FLOAT;
    case DataType::float64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;  // MPI has no 16-bit floats
  }
}
MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::prod: return MPI_PROD;
    case ReduceOp::min: return MPI_MIN;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::band: return MPI_BAND;
    case ReduceOp::bor: return MPI_BOR;
    case ReduceOp::bxor: return MPI_BXOR;
    default: return MPI_OP_NULL;  // no avg in MPI
  }
}
#endif

class Runner {
 public:
  Runner(const PerfOptions& o, Communicator& comm)
      : o_(o), comm_(comm), rank_(comm.rank()), ranks_(comm.size()) {
    std::size_t largest_element = 1;
    for (DataType t : o.types) largest_element = std::max(largest_element, size_of(t));
    const std::size_t bytes = o.max_bytes + o.unalign * largest_element;
    send_ = std::make_unique<Buffer>(o.max_bytes, o.unalign * largest_element);
    recv_ = std::make_unique<Buffer>(o.max_bytes, o.unalign * largest_element);
    // Twice the largest size: reduce_scatter's check keeps the whole
    // reduction beside the block it compares.
    if (o.check) expected_ = std::make_unique<Buffer>(2 * bytes, 0);
    if (rooted(o.collective) && o.root >= ranks_)
      throw UsageError(fmt::format("-r/--root: {} is not a rank of the {} ranks", o.root, ranks_));
  }

  // The whole run; returns the number of (size, block) results with wrong elements.
  int run() {
    if (rank_ == 0) preamble();
    // Collectives without an op run once per type (the op column says none).
    const std::vector<ReduceOp> ops =
        reduces(o_.collective) ? o_.ops : std::vector<ReduceOp>{ReduceOp::sum};
    for (int cycle = 0; o_.run_cycles == 0 || cycle < o_.run_cycles; ++cycle)
      for (DataType type : o_.types)
        for (ReduceOp op : ops) {
          if (!is_supported(type, op)) {
            if (o_.types.size() == 1 && o_.ops.size() == 1)
              throw UsageError(fmt::format("op {} is not defined for {}", to_string(op),
                                           nccl_type_name(type)));
            continue;  // "all" sweeps only the pairs that exist
          }
          sweep(type, op);
        }
    if (rank_ == 0) finish();
    return failed_;
  }

 private:
  void preamble() {
    std::printf("# Collective test starting: %s_perf\n", std::string(to_string(o_.collective)).c_str());
    std::printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
                "iters: %d agg iters: %d validation: %d graph: 0\n",
                o_.min_bytes, o_.max_bytes, o_.step_factor > 1 ? o_.step_factor : o_.step_bytes,
                o_.step_factor > 1 ? "factor" : "bytes", o_.warmup_iters, o_.iters, o_.agg_iters,
                o_.check);
    if (o_.blocking) std::printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
    if (o_.rounds > 1)
      std::printf(
          "# Rounds: %d (a size's cells timed in turn %d times; each time is its cell's median)\n",
          o_.rounds, o_.rounds);
    std::printf("#\n");
    const auto& model = engine().cost_model();
    std::printf("# Chorus %s: %d ranks over %.*s; cost model alpha %.2f us, overhead %.2f us, "
                "beta %.2f GB/s, gamma %.2f GB/s\n",
                version_string(), ranks_, static_cast<int>(comm_.transport_name().size()),
                comm_.transport_name().data(), model.alpha * 1e6, model.overhead * 1e6,
                model.beta > 0 ? 1e-9 / model.beta : 0.0, model.gamma > 0 ? 1e-9 / model.gamma : 0.0);
    std::printf("# Using devices\n%s#\n", devices_.c_str());
    std::printf("%s", header(o_.mpi).c_str());
    std::fflush(stdout);
  }

  void finish() {
    std::printf("%s", footer(failed_, busbw_count_ ? busbw_sum_ / busbw_count_ : 0.0).c_str());
    if (!o_.json_file.empty()) {
      std::ofstream(o_.json_file) << json_document(rows_, ranks_, std::string(comm_.transport_name()),
                                                   std::string(to_string(o_.collective)) + "_perf");
    }
    if (!o_.tune_file.empty()) {
      coll::Tuning tuning;
      tuning.model = engine().cost_model();
      for (const auto& [bytes, best] : best_) tuning.entries.push_back({ranks_, bytes, best.second});
      coll::write_tuning(o_.tune_file, tuning);
      std::printf("# Tuning file written: %s (%zu sizes)\n", o_.tune_file.c_str(), best_.size());
    }
    std::fflush(stdout);
  }

 public:
  // Gathers "Rank r Pid ... on host" from every rank (before preamble()).
  void gather_devices() {
    constexpr std::size_t kLine = 96;
    std::vector<std::uint8_t> lines(kLine * static_cast<std::size_t>(ranks_), 0);
    char host[64] = {};
    ::gethostname(host, sizeof host - 1);
    const std::string mine = fmt::format("#  Rank {:2} Group  0 Pid {:6} on {:>10} device {:2} [cpu] chorus/{}\n",
                                         rank_, ::getpid(), host, rank_, comm_.transport_name());
    std::memcpy(lines.data() + kLine * static_cast<std::size_t>(rank_), mine.data(),
                std::min(mine.size(), kLine - 1));
    comm_.allreduce(std::span<std::uint8_t>(lines), ReduceOp::bor);
    for (int r = 0; r < ranks_; ++r) devices_ += reinterpret_cast<const char*>(lines.data() + kLine * r);
  }

 private:
  void barrier() {
    std::int32_t token = 0;
    comm_.allreduce(&token, &token, 1, DataType::int32, ReduceOp::sum);
  }

  // Time per call across ranks, per -a.
  double combine_time(double seconds) {
    ReduceOp op = ReduceOp::sum;
    if (o_.average == 0 && rank_ != 0) seconds = 0;
    if (o_.average == 2) op = ReduceOp::min;
    if (o_.average == 3) op = ReduceOp::max;
    comm_.allreduce(&seconds, &seconds, 1, DataType::float64, op);
    return o_.average == 1 ? seconds / ranks_ : seconds;
  }

  // `count`: the row's count (all p blocks for the gathering and scattering
  // collectives, as nccl-tests counts them).
  std::size_t per_rank(std::size_t count) const {
    return size_is_all_blocks(o_.collective) ? count / static_cast<std::size_t>(ranks_) : count;
  }

  // The buffers of one call, in place or not, as nccl-tests lays them out:
  // allgather's send is this rank's block of recv; reduce_scatter's recv is
  // this rank's block of send.
  struct Buffers {
    const void* send;
    void* recv;
    std::byte* result;  // where this rank's checked result lands
  };
  Buffers buffers(std::size_t count, DataType type, bool in_place) {
    std::byte* recv = recv_->data();
    std::byte* send = in_place ? recv : send_->data();
    const std::size_t mine = static_cast<std::size_t>(rank_) * per_rank(count) * size_of(type);
    switch (o_.collective) {
      case PerfCollective::allgather: return {in_place ? recv + mine : send, recv, recv};
      case PerfCollective::reduce_scatter:
        return {send, in_place ? send + mine : recv, in_place ? send + mine : recv};
      default: return {send, recv, recv};
    }
  }

  // What a call reads of this rank's: what --rewrite writes before each call.
  std::span<std::byte> input_of(std::size_t count, DataType type, bool in_place) {
    const Buffers b = buffers(count, type, in_place);
    std::size_t bytes = per_rank(count) * size_of(type);
    if (o_.collective == PerfCollective::reduce_scatter || o_.collective == PerfCollective::alltoall)
      bytes *= static_cast<std::size_t>(ranks_);
    auto* first = o_.collective == PerfCollective::broadcast
                      ? static_cast<std::byte*>(b.recv)
                      : const_cast<std::byte*>(static_cast<const std::byte*>(b.send));
    return {first, bytes};
  }

  // The mean seconds of one `timed_call` over the timed iterations. With
  // --rewrite, `input` is written before every call, as each training step
  // writes new gradients, and only the calls are timed: then no call finds
  // its peers' input still in its cache from the call before (out of place
  // an unchanged input does, in place the last result never does).
  template <class TimedCall>
  double mean_call_seconds(std::span<std::byte> input, TimedCall&& timed_call) {
    const int calls = o_.iters * o_.agg_iters;
    if (!o_.rewrite) {
      const auto start = Clock::now();
      for (int i = 0; i < calls; ++i) timed_call();
      return std::chrono::duration<double>(Clock::now() - start).count() / calls;
    }
    Clock::duration spent{};
    for (int i = 0; i < calls; ++i) {
      std::memset(input.data(), 0x3c, input.size());  // 0x3c..: a normal number in every float type
      const auto start = Clock::now();
      timed_call();
      spent += Clock::now() - start;
    }
    return std::chrono::duration<double>(spent).count() / calls;
  }

  // `forced` names the algorithm (made once per sweep: no string is built per call).
  void call(std::size_t count, DataType type, ReduceOp op, bool in_place,
            const CallOptions& forced) {
    const Buffers b = buffers(count, type, in_place);
    const std::size_t n = per_rank(count);
    if (o_.async) {
      call_async(b, n, type, op, forced).wait();
      return;
    }
    switch (o_.collective) {
      case PerfCollective::allreduce: return comm_.allreduce(b.send, b.recv, n, type, op, forced);
      case PerfCollective::allgather: return comm_.allgather(b.send, b.recv, n, type, forced);
      case PerfCollective::broadcast: return comm_.broadcast(b.recv, n, type, o_.root, forced);
      case PerfCollective::reduce: return comm_.reduce(b.send, b.recv, n, type, op, o_.root, forced);
      case PerfCollective::reduce_scatter:
        return comm_.reduce_scatter(b.send, b.recv, n, type, op, forced);
      case PerfCollective::alltoall: return comm_.alltoall(b.send, b.recv, n, type, forced);
    }
  }

  Work call_async(const Buffers& b, std::size_t n, DataType type, ReduceOp op,
                  const CallOptions& forced) {
    switch (o_.collective) {
      case PerfCollective::allreduce: return comm_.allreduce_async(b.send, b.recv, n, type, op, forced);
      case PerfCollective::allgather: return comm_.allgather_async(b.send, b.recv, n, type, forced);
      case PerfCollective::broadcast: return comm_.broadcast_async(b.recv, n, type, o_.root, forced);
      case PerfCollective::reduce:
        return comm_.reduce_async(b.send, b.recv, n, type, op, o_.root, forced);
      case PerfCollective::reduce_scatter:
        return comm_.reduce_scatter_async(b.send, b.recv, n, type, op, forced);
      case PerfCollective::alltoall: return comm_.alltoall_async(b.send, b.recv, n, type, forced);
    }
    return {};
  }

  // The registry row that runs a call of `count` when `algorithm` is asked for.
  const coll::AlgorithmRow& algorithm_row(std::size_t count, DataType type,
                                          const std::string& algorithm) {
    coll::Operands shape;
    shape.count = per_rank(count);
    shape.type = type;
    const coll::CollectiveKind kind = kind_of(o_.collective);
    return *engine().choose(kind, algorithm, coll::choice_bytes(kind, shape, ranks_)).row;
  }
  // Whether algorithm `a` can run a call of `count` here (shm: only while
  // the call fits the host segment's slots); why_not() says why not.
  bool runs(std::size_t count, DataType type, const std::string& a) {
    return why_not(count, type, a).empty();
  }
  std::string why_not(std::size_t count, DataType type, const std::string& a) {
    try {
      algorithm_row(count, type, a);
      return {};
    } catch (const Error& e) {
      if (e.code() != ErrorCode::invalid_argument) throw;
      return e.what();
    }
  }
  Communicator::Impl& engine() { return CommunicatorAccess::engine(comm_); }
  static CallOptions forced(const std::string& algorithm) {
    CallOptions options;
    options.algorithm_name = algorithm;
    return options;
  }

  // One timed series of calls (after its warm-up): seconds per call,
  // combined over the ranks as -a says.
  double time_series(std::size_t count, DataType type, ReduceOp op, bool in_place,
                     const CallOptions& algorithm) {
    warm_up([&] { call(count, type, op, in_place, algorithm); });
    barrier();
    const std::span<std::byte> input = input_of(count, type, in_place);
    return combine_time(mean_call_seconds(input, [&] {
      call(count, type, op, in_place, algorithm);
      if (o_.blocking) barrier();
    }));
  }

  // Re-initializes the buffers with exactly verifiable values, runs once,
  // and counts wrong elements over all ranks.
  std::int64_t check(std::size_t count, DataType type, ReduceOp op, bool in_place,
                     const CallOptions& algorithm) {
    std::int64_t wrong = 0;
    for (int c = 0; c < o_.check && wrong == 0; ++c) {
      ++seed_;
      const std::size_t checked = prepare_check(count, type, op, in_place);
      call(count, type, op, in_place, algorithm);
      std::byte* result = buffers(count, type, in_place).result;
      if (o_.inject_error && rank_ == ranks_ - 1 && checked > 0)
        result[0] = static_cast<std::byte>(~std::to_integer<unsigned>(result[0]));
      wrong = static_cast<std::int64_t>(count_wrong(result, expected_->data(), checked, type));
      comm_.allreduce(&wrong, &wrong, 1, DataType::int64, ReduceOp::sum);
    }
    return wrong;
  }

  // Fills this rank's input and expected_ (what its result must be) for one
  // checked call; returns how many elements of the result are checked.
  std::size_t prepare_check(std::size_t count, DataType type, ReduceOp op, bool in_place) {
    const Buffers b = buffers(count, type, in_place);
    auto* input = const_cast<std::byte*>(static_cast<const std::byte*>(b.send));
    std::byte* expected = expected_->data();
    const std::size_t n = per_rank(count), block = n * size_of(type);
    // Rank j's block `to` of an alltoall: its own seed per destination.
    auto block_seed = [&](int to) { return seed_ * 4099 + static_cast<std::uint64_t>(to); };
    switch (o_.collective) {
      case PerfCollective::allreduce:
        fill_input(input, n, type, op, rank_, ranks_, seed_);
        fill_expected(expected, n, type, op, ranks_, seed_);
        return n;
      case PerfCollective::reduce:
        fill_input(input, n, type, op, rank_, ranks_, seed_);
        fill_expected(expected, n, type, op, ranks_, seed_);
        return rank_ == o_.root ? n : 0;
      case PerfCollective::broadcast:
        if (rank_ == o_.root) fill_input(b.recv, n, type, op, o_.root, ranks_, seed_);
        else std::memset(b.recv, 0xff, block);
        fill_input(expected, n, type, op, o_.root, ranks_, seed_);
        return n;
      case PerfCollective::allgather:
        fill_input(input, n, type, op, rank_, ranks_, seed_);
        for (int j = 0; j < ranks_; ++j)
          fill_input(expected + static_cast<std::size_t>(j) * block, n, type, op, j, ranks_, seed_);
        return n * static_cast<std::size_t>(ranks_);
      case PerfCollective::reduce_scatter: {
        // All p blocks reduced; this rank's block of the result is checked.
        const std::size_t all = n * static_cast<std::size_t>(ranks_);
        fill_input(input, all, type, op, rank_, ranks_, seed_);
        fill_expected(expected_->data() + block * static_cast<std::size_t>(ranks_), all, type, op,
                      ranks_, seed_);
        std::memcpy(expected, expected + block * static_cast<std::size_t>(ranks_) +
                                  block * static_cast<std::size_t>(rank_), block);
        return n;
      }
      case PerfCollective::alltoall:
        for (int j = 0; j < ranks_; ++j) {
          fill_input(input + static_cast<std::size_t>(j) * block, n, type, op, rank_, ranks_, block_seed(j));
          fill_input(expected + static_cast<std::size_t>(j) * block, n, type, op, j, ranks_, block_seed(rank_));
        }
        return n * static_cast<std::size_t>(ranks_);
    }
    return 0;
  }

#if defined(CHORUS_PERF_WITH_MPI)
  // The matching MPI collective on the same buffers, out of place or with
  // MPI_IN_PLACE (for the collectives timed in place here: MPI reads the
  // input from the receive buffer; its reduce-scatter leaves its block at
  // the buffer's start, where Chorus's is this rank's block of it).
  void call_mpi(std::size_t count, MPI_Datatype t, MPI_Op m, bool in_place) {
    void* recv = recv_->data();
    const void* send = in_place ? MPI_IN_PLACE : send_->data();
    const int n = static_cast<int>(per_rank(count));
    const bool root = rank_ == o_.root;
    switch (o_.collective) {
      case PerfCollective::allreduce: MPI_Allreduce(send, recv, n, t, m, MPI_COMM_WORLD); return;
      case PerfCollective::allgather: MPI_Allgather(send, n, t, recv, n, t, MPI_COMM_WORLD); return;
      case PerfCollective::broadcast: MPI_Bcast(recv, n, t, o_.root, MPI_COMM_WORLD); return;
      case PerfCollective::reduce:
        // In place only the root's send is MPI_IN_PLACE; the others' is their buffer.
        MPI_Reduce(in_place && !root ? recv : send, recv, n, t, m, o_.root, MPI_COMM_WORLD);
        return;
      case PerfCollective::reduce_scatter:
        MPI_Reduce_scatter_block(send, recv, n, t, m, MPI_COMM_WORLD);
        return;
      case PerfCollective::alltoall: MPI_Alltoall(send, n, t, recv, n, t, MPI_COMM_WORLD); return;
    }
  }

  bool mpi_has(DataType type, ReduceOp op) const {
    return mpi_type(type) != MPI_DATATYPE_NULL &&
           (!reduces(o_.collective) || mpi_op(op) != MPI_OP_NULL);
  }

  // As time_series(), MPI's collective; none where MPI has no such type or op.
  std::optional<double> time_mpi_series(std::size_t count, DataType type, ReduceOp op,
                                        bool in_place) {
    if (!mpi_has(type, op)) return std::nullopt;
    const MPI_Datatype t = mpi_type(type);
    const MPI_Op m = mpi_op(op);
    warm_up([&] { call_mpi(count, t, m, in_place); });
    MPI_Barrier(MPI_COMM_WORLD);
    // --rewrite writes what the call reads: as Chorus's of the same
    // placement, but MPI's reduce-scatter in place reads its receive buffer.
    std::span<std::byte> input = input_of(count, type, in_place);
    if (in_place && o_.collective == PerfCollective::reduce_scatter)
      input = {recv_->data(), input.size()};
    return combine_time(mean_call_seconds(input, [&] {
      call_mpi(count, t, m, in_place);
      if (o_.blocking) MPI_Barrier(MPI_COMM_WORLD);
    }));
  }
#endif

  // Untimed calls before every timed series (at least one: it also syncs the
  // ranks, as nccl-tests' first call does). nccl-tests warms up only at the
  // largest and smallest size; here every series is, because on a CPU the
  // first calls at a new size fault in pages of the buffers, scratch and
  // shared slots that smaller sizes never touched, and the first series
  // timed at a size (out of place) paid it alone: up to 4x its steady time.
  template <class Call>
  void warm_up(Call&& one) {
    for (int i = 0; i < std::max(1, o_.warmup_iters); ++i) one();
  }

  // One cell of a size's rows (an algorithm or MPI, out of place or in
  // place): seconds per call of each round's series, and the wrong
  // elements of its check (-1: not checked).
  struct Cell {
    std::vector<double> seconds;
    std::int64_t wrong = -1;
  };
  struct Cells {
    Cell out_of_place, in_place, mpi, mpi_in_place;
  };

  // Each size's cells are timed --rounds times, all in turn (round robin),
  // and each row reports its cells' median series. The rows of the last
  // round print as they finish, so that one round (the default) prints
  // each row as soon as it is measured, as nccl-tests does.
  void sweep(DataType type, ReduceOp op) {
    const std::size_t esize = size_of(type);
    for (std::size_t size : o_.sizes()) {
      const std::size_t count = rounded(size / esize);
      std::vector<std::string> runnable;
      for (const std::string& a : o_.algorithms) {
        if (runs(count, type, a))
          runnable.push_back(a);
        else if (rank_ == 0)  // shm beyond its slots: a row with the reason
          std::printf("# %zu bytes: %s\n", count * esize, why_not(count, type, a).c_str());
      }
      std::vector<Cells> cells(runnable.size());
      for (int round = 0; round < o_.rounds; ++round)
        for (std::size_t i = 0; i < runnable.size(); ++i) {
          // MPI's cells beside the first algorithm's (MPI has no choice to make).
          time_cells(cells[i], count, type, op, runnable[i], round == 0, o_.mpi && i == 0);
          if (round + 1 == o_.rounds)
            record(row_of(cells[i], count, type, op, runnable[i]), runnable[i]);
        }
    }
  }

  // One series of each of `a`'s cells (and of MPI's, `with_mpi`), each
  // checked after its series when `check_too`.
  void time_cells(Cells& cells, std::size_t count, DataType type, ReduceOp op, const std::string& a,
                  bool check_too, bool with_mpi) {
    const CallOptions options = forced(a);
    const auto time = [&](Cell& cell, bool in_place) {
      cell.seconds.push_back(time_series(count, type, op, in_place, options));
      if (check_too && o_.check) cell.wrong = check(count, type, op, in_place, options);
    };
    time(cells.out_of_place, false);
    if (has_in_place(o_.collective)) time(cells.in_place, true);
#if defined(CHORUS_PERF_WITH_MPI)
    if (!with_mpi) return;
    for (bool in_place : {false, true}) {
      if (in_place && !has_in_place(o_.collective)) break;
      if (const std::optional<double> s = time_mpi_series(count, type, op, in_place))
        (in_place ? cells.mpi_in_place : cells.mpi).seconds.push_back(*s);
    }
#else
    (void)with_mpi;
#endif
  }

  Row row_of(const Cells& cells, std::size_t count, DataType type, ReduceOp op,
             const std::string& a) {
    Row row;
    row.bytes = count * size_of(type);
    row.count = count;
    row.type = type;
    row.op = op;
    row.has_op = reduces(o_.collective);
    row.root = rooted(o_.collective) ? o_.root : -1;
    row.algorithm = std::string(algorithm_row(count, type, a).name);
    row.automatic = a == "auto";
    const auto timing = [&](const Cell& cell) -> std::optional<Timing> {
      if (cell.seconds.empty()) return std::nullopt;
      Timing t = bandwidth(row.bytes, median(cell.seconds), busbw_factor(o_.collective, ranks_));
      t.wrong = cell.wrong;
      const auto [fastest, slowest] = std::minmax_element(cell.seconds.begin(), cell.seconds.end());
      t.min_us = *fastest * 1e6;
      t.max_us = *slowest * 1e6;
      return t;
    };
    row.out_of_place = *timing(cells.out_of_place);
    row.in_place = timing(cells.in_place);
    row.mpi = timing(cells.mpi);
    row.mpi_in_place = timing(cells.mpi_in_place);
    return row;
  }

  // A count the collective can split into p equal blocks, where it must.
  std::size_t rounded(std::size_t count) const {
    return per_rank(count) * (size_is_all_blocks(o_.collective) ? static_cast<std::size_t>(ranks_) : 1);
  }

  void record(const Row& row, const std::string& a) {
    for (const Timing* t : {&row.out_of_place, row.in_place ? &*row.in_place : nullptr}) {
      if (t == nullptr) continue;
      if (t->wrong > 0) ++failed_;
      busbw_sum_ += t->busbw;
      ++busbw_count_;
    }
    if (a != "auto" && o_.collective == PerfCollective::allreduce) {
      // --tune: the fastest forced variant per size
      auto& best = best_[row.bytes];
      if (best.first == 0 || row.out_of_place.time_us < best.first)
        best = {row.out_of_place.time_us,
                static_cast<coll::Variant>(algorithm_row(row.count, row.type, a).id)};
    }
    if (rank_ != 0) return;
    std::string line = format_row(row);
    if (o_.mpi && !row.mpi) {  // MPI has no such type or op: keep the columns
      line.pop_back();
      line += mpi_block(std::nullopt, {}) + mpi_block(std::nullopt, {}) + "\n";
    }
    std::printf("%s", line.c_str());
    std::fflush(stdout);
    rows_.push_back(row);
    if (!o_.csv_file.empty()) {
      if (!csv_) {
        csv_ = std::make_unique<std::ofstream>(o_.csv_file);
        *csv_ << csv_header(o_.mpi);
      }
      *csv_ << csv_row(row, ranks_, std::string(comm_.transport_name()));
      csv_->flush();
    }
  }

  const PerfOptions& o_;
  Communicator& comm_;
  const int rank_, ranks_;
  std::unique_ptr<Buffer> send_, recv_, expected_;
  std::uint64_t seed_ = 0;
  int failed_ = 0;
  double busbw_sum_ = 0;
  int busbw_count_ = 0;
  std::vector<Row> rows_;
  std::unique_ptr<std::ofstream> csv_;
  std::map<std::size_t, std::pair<double, coll::Variant>> best_;
  std::string devices_;
};

int run_rank(PerfOptions o) {
#if defined(CHORUS_PERF_WITH_MPI)
  if (o.mpi) MPI_Init(nullptr, nullptr);
#else
  if (o.mpi) throw UsageError("--mpi: this build has no MPI");
#endif
  if (!o.tune_file.empty() && o.algorithms == std::vector<std::string>{"auto"}) {
    o.algorithms = parse({"-A", "all"}, o.collective).algorithms;
    o.algorithms.pop_back();  // every algorithm, without auto
  }
  Options options;
  options.transport = o.transport;
  if (o.timeout_seconds > 0) options.timeout = std::chrono::seconds(o.timeout_seconds);
  int failed = 0;
  {
    Communicator comm = Communicator::from_env(options);
    Runner runner(o, comm);
    runner.gather_devices();
    failed = runner.run();
  }
#if defined(CHORUS_PERF_WITH_MPI)
  if (o.mpi) MPI_Finalize();
#endif
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace chorus::perf

int main(int argc, char** argv) {
  using namespace chorus::perf;
  setlinebuf(stdout);
  std::vector<std::string> args(argv + 1, argv + argc);
  // The name picks the collective; any other name (a renamed copy) measures allreduce.
  const auto collective = collective_from_program(argv[0]);
  const std::string program =
      std::string(to_string(collective.value_or(PerfCollective::allreduce))) + "_perf";
  PerfOptions options;
  try {
    options = parse(args, collective.value_or(PerfCollective::allreduce));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n\n%s", program.c_str(), e.what(), usage(program).c_str());
    return 2;
  }
  if (options.help) {
    std::printf("%s", usage(program).c_str());
    return 0;
  }
  if (options.np > 0) {
    if (options.mpi) {
      std::fprintf(stderr, "%s: --mpi needs ranks started by mpirun, not --np\n\n%s", program.c_str(),
                   usage(program).c_str());
      return 2;
    }
    // The ranks run this same command without --np.
    std::vector<std::string> child = {argv[0]};
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--np") {
        ++i;
        continue;
      }
      if (args[i].rfind("--np=", 0) == 0) continue;
      child.push_back(args[i]);
    }
    return launch_local(child, options.np);
  }
  try {
    return run_rank(options);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n\n%s", program.c_str(), e.what(), usage(program).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), e.what());
    return 1;
  }
}
