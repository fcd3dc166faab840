// allreduce_perf: Chorus AllReduce measured the way nccl-tests measures NCCL,
// optionally beside MPI_Allreduce in the same run. See options.cpp (usage)
// and docs/allreduce_perf.md.
#include "local_launch.hpp"
#include "options.hpp"
#include "report.hpp"
#include "verify.hpp"

#include "api/communicator_impl.hpp"

#include <chorus/chorus.hpp>
#include <fmt/format.h>
#include <unistd.h>

#if defined(CHORUS_PERF_WITH_MPI)
#include <mpi.h>
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>

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
    if (o.check) expected_ = std::make_unique<Buffer>(bytes, 0);
  }

  // The whole run; returns the number of (size, block) results with wrong elements.
  int run() {
    if (rank_ == 0) preamble();
    for (int cycle = 0; o_.run_cycles == 0 || cycle < o_.run_cycles; ++cycle)
      for (DataType type : o_.types)
        for (ReduceOp op : o_.ops) {
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
    std::printf("# Collective test starting: allreduce_perf\n");
    std::printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
                "iters: %d agg iters: %d validation: %d graph: 0\n",
                o_.min_bytes, o_.max_bytes, o_.step_factor > 1 ? o_.step_factor : o_.step_bytes,
                o_.step_factor > 1 ? "factor" : "bytes", o_.warmup_iters, o_.iters, o_.agg_iters,
                o_.check);
    if (o_.blocking) std::printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
    std::printf("#\n");
    const auto& model = comm_.impl().selector->model();
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
      std::ofstream(o_.json_file) << json_document(rows_, ranks_, std::string(comm_.transport_name()));
    }
    if (!o_.tune_file.empty()) {
      coll::Tuning tuning;
      tuning.model = comm_.impl().selector->model();
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

  void call(std::size_t count, DataType type, ReduceOp op, bool in_place, Algorithm algorithm) {
    void* recv = recv_->data();
    const void* send = in_place ? recv : send_->data();
    comm_.allreduce(send, recv, count, type, op, {algorithm});
  }

  Timing measure(std::size_t count, DataType type, ReduceOp op, bool in_place, Algorithm algorithm) {
    const std::size_t bytes = count * size_of(type);
    call(count, type, op, in_place, algorithm);  // sync, as nccl-tests does
    barrier();
    const auto start = Clock::now();
    for (int i = 0; i < o_.iters; ++i)
      for (int a = 0; a < o_.agg_iters; ++a) {
        call(count, type, op, in_place, algorithm);
        if (o_.blocking) barrier();
      }
    const double seconds =
        std::chrono::duration<double>(Clock::now() - start).count() / (o_.iters * o_.agg_iters);
    Timing t = bandwidth(bytes, combine_time(seconds), ranks_);
    t.wrong = o_.check ? check(count, type, op, in_place, algorithm) : -1;
    return t;
  }

  // Re-initializes the buffers with exactly verifiable values, runs once,
  // and counts wrong elements over all ranks.
  std::int64_t check(std::size_t count, DataType type, ReduceOp op, bool in_place, Algorithm algorithm) {
    std::int64_t wrong = 0;
    for (int c = 0; c < o_.check && wrong == 0; ++c) {
      ++seed_;
      fill_input(in_place ? recv_->data() : send_->data(), count, type, op, rank_, ranks_, seed_);
      fill_expected(expected_->data(), count, type, op, ranks_, seed_);
      call(count, type, op, in_place, algorithm);
      if (o_.inject_error && rank_ == ranks_ - 1 && count > 0)
        recv_->data()[0] = static_cast<std::byte>(~std::to_integer<unsigned>(recv_->data()[0]));
      wrong = static_cast<std::int64_t>(count_wrong(recv_->data(), expected_->data(), count, type));
      comm_.allreduce(&wrong, &wrong, 1, DataType::int64, ReduceOp::sum);
    }
    return wrong;
  }

#if defined(CHORUS_PERF_WITH_MPI)
  std::optional<Timing> measure_mpi(std::size_t count, DataType type, ReduceOp op) {
    const MPI_Datatype t = mpi_type(type);
    const MPI_Op m = mpi_op(op);
    if (t == MPI_DATATYPE_NULL || m == MPI_OP_NULL) return std::nullopt;
    const int n = static_cast<int>(count);
    MPI_Allreduce(send_->data(), recv_->data(), n, t, m, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = Clock::now();
    for (int i = 0; i < o_.iters * o_.agg_iters; ++i) {
      MPI_Allreduce(send_->data(), recv_->data(), n, t, m, MPI_COMM_WORLD);
      if (o_.blocking) MPI_Barrier(MPI_COMM_WORLD);
    }
    const double seconds =
        std::chrono::duration<double>(Clock::now() - start).count() / (o_.iters * o_.agg_iters);
    return bandwidth(count * size_of(type), combine_time(seconds), ranks_);
  }
#endif

  void sweep(DataType type, ReduceOp op) {
    const std::size_t esize = size_of(type);
    // Warm-up at the largest and the smallest size, as nccl-tests does.
    for (Algorithm a : o_.algorithms)
      for (std::size_t bytes : {o_.max_bytes, o_.min_bytes})
        for (int i = 0; i < o_.warmup_iters; ++i) call(bytes / esize, type, op, false, a);
#if defined(CHORUS_PERF_WITH_MPI)
    if (o_.mpi && mpi_type(type) != MPI_DATATYPE_NULL && mpi_op(op) != MPI_OP_NULL)
      for (std::size_t bytes : {o_.max_bytes, o_.min_bytes})
        for (int i = 0; i < o_.warmup_iters; ++i)
          MPI_Allreduce(send_->data(), recv_->data(), static_cast<int>(bytes / esize), mpi_type(type),
                        mpi_op(op), MPI_COMM_WORLD);
#endif
    for (std::size_t size : o_.sizes()) {
      const std::size_t count = size / esize;
      for (Algorithm a : o_.algorithms) {
        Row row;
        row.bytes = count * esize;
        row.count = count;
        row.type = type;
        row.op = op;
        row.algorithm = std::string(coll::to_string(comm_.impl().choose(a, row.bytes).variant));
        row.automatic = a == Algorithm::automatic;
        row.out_of_place = measure(count, type, op, false, a);
        row.in_place = measure(count, type, op, true, a);
#if defined(CHORUS_PERF_WITH_MPI)
        if (o_.mpi && a == o_.algorithms.front()) row.mpi = measure_mpi(count, type, op);
#endif
        record(row, a);
      }
    }
  }

  void record(const Row& row, Algorithm a) {
    for (const Timing* t : {&row.out_of_place, &row.in_place}) {
      if (t->wrong > 0) ++failed_;
      busbw_sum_ += t->busbw;
      ++busbw_count_;
    }
    if (a != Algorithm::automatic) {  // --tune: the fastest forced variant per size
      auto& best = best_[row.bytes];
      if (best.first == 0 || row.out_of_place.time_us < best.first)
        best = {row.out_of_place.time_us, comm_.impl().choose(a, row.bytes).variant};
    }
    if (rank_ != 0) return;
    std::string line = format_row(row);
    if (o_.mpi && !row.mpi) {  // MPI has no such type or op: keep the columns
      line.pop_back();
      line += fmt::format("  {:>8}  {:>9}  {:>7}\n", "N/A", "N/A", "N/A");
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
  if (o.mpi) throw UsageError("--mpi: this allreduce_perf was built without MPI");
#endif
  if (!o.tune_file.empty() && o.algorithms == std::vector<Algorithm>{Algorithm::automatic})
    o.algorithms = {Algorithm::ring, Algorithm::tree, Algorithm::direct, Algorithm::halving_doubling,
                    Algorithm::recursive_doubling};
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
  const std::string program = "allreduce_perf";
  PerfOptions options;
  try {
    options = parse(args);
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
