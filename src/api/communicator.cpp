#include "api/communicator_impl.hpp"

#include "bootstrap/launch.hpp"
#include "coll/collectives.hpp"
#include "common/logging.hpp"
#include "transport/local/local_transport.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <limits>

namespace chorus {

// ---- Work ------------------------------------------------------------------

void Work::State::finish(std::optional<Error> e) {
  {
    std::lock_guard lock(mutex);
    error = std::move(e);
    done = true;
  }
  done_cv.notify_all();
}

Work::Work() = default;
Work::~Work() = default;
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&&) noexcept = default;
Work::Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

bool Work::test() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mutex);
  return state_->done;
}

bool Work::wait(std::chrono::duration<double> timeout) {
  if (!state_) return true;
  std::unique_lock lock(state_->mutex);
  const auto limit = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::min(timeout, std::chrono::duration<double>(std::chrono::hours(24 * 365))));
  if (!state_->done_cv.wait_for(lock, limit, [&] { return state_->done; })) return false;
  if (state_->error) throw *state_->error;
  return true;
}

std::optional<Error> Work::error() const {
  if (!state_) return std::nullopt;
  std::lock_guard lock(state_->mutex);
  return state_->error;
}

// ---- Algorithm names -------------------------------------------------------

namespace {
constexpr std::string_view kAlgorithmNames[kAlgorithmCount] = {
    "auto", "ring", "tree", "direct", "halving_doubling", "recursive_doubling"};
}

std::string_view to_string(Algorithm a) noexcept {
  const auto i = static_cast<std::size_t>(a);
  return i < kAlgorithmCount ? kAlgorithmNames[i] : "unknown";
}

std::optional<Algorithm> parse_algorithm(std::string_view name) noexcept {
  if (name == "automatic") return Algorithm::automatic;
  for (int i = 0; i < kAlgorithmCount; ++i)
    if (kAlgorithmNames[i] == name) return static_cast<Algorithm>(i);
  return std::nullopt;
}

// ---- Impl --------------------------------------------------------------------

namespace {

// CHORUS_ALGO, when it names an algorithm other than auto.
std::optional<Algorithm> algorithm_from_env() {
  const char* env = std::getenv("CHORUS_ALGO");
  if (env == nullptr || *env == '\0') return std::nullopt;
  const auto a = parse_algorithm(env);
  if (!a)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("CHORUS_ALGO='{}' is not one of auto, ring, tree, direct, "
                            "halving_doubling, recursive_doubling",
                            env));
  if (*a == Algorithm::automatic) return std::nullopt;
  return a;
}

// CHORUS_CHECK=0 turns the call check off (1, the default, keeps it).
bool check_from_env() {
  const char* env = std::getenv("CHORUS_CHECK");
  if (env == nullptr || *env == '\0' || std::string_view(env) == "1") return true;
  if (std::string_view(env) == "0") return false;
  throw Error(ErrorCode::invalid_argument, fmt::format("CHORUS_CHECK='{}' is not 0 or 1", env));
}

coll::Tuning tuning_from_env() {
  const char* path = std::getenv("CHORUS_TUNING_FILE");
  if (path == nullptr || *path == '\0') return {};
  return coll::read_tuning(path);
}

double us(double seconds) { return seconds * 1e6; }

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

}  // namespace

Communicator::Impl::Impl(std::unique_ptr<transport::Transport> t,
                         std::unique_ptr<bootstrap::Store> s, const Options& options)
    : store(std::move(s)), transport(std::move(t)) {
  timeout_seconds = options.timeout ? options.timeout->count() : bootstrap::timeout_seconds();
  if (!(timeout_seconds > 0))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("timeout {} s: must be positive", timeout_seconds));
  const auto forced = algorithm_from_env();
  forced_by_env = forced.has_value();
  algorithm = forced ? *forced : options.algorithm;
  if (!is_valid(algorithm))
    throw Error(ErrorCode::invalid_argument, "Options::algorithm is not an Algorithm");
  coll::Tuning tuning = tuning_from_env();
  check_calls = check_from_env();
  if (transport->name() != "local") log::set_rank(transport->rank());  // threads share the log

  // Every rank probes (so that ranks with and without a tuning file still
  // meet); a tuning file's model, when it has one, replaces the probe's.
  coll::Collective probe{*transport, 0, transport::deadline_after(timeout_seconds), nullptr,
                         &abort_requested, &scratch};
  coll::CostModel model = coll::probe_cost_model(probe);
  const char* source = "probe";
  if (tuning.model) {
    model = *tuning.model;
    source = "tuning file";
  }
  log::info("communicator: rank {} of {} over {}; cost model ({}): alpha {:.2f} us, overhead "
            "{:.2f} us, beta {:.3f} GB/s, gamma {:.3f} GB/s; algorithm {}{}",
            transport->rank(), transport->size(), transport->name(), source, us(model.alpha),
            us(model.overhead),
            model.beta > 0 ? 1e-9 / model.beta : 0.0, model.gamma > 0 ? 1e-9 / model.gamma : 0.0,
            to_string(algorithm), forced ? " (CHORUS_ALGO)" : "");
  selector = std::make_unique<coll::Selector>(model, std::move(tuning));
}

Communicator::Impl::~Impl() {
  {
    std::lock_guard lock(queue_mutex);
    stopping = true;
  }
  queue_cv.notify_all();
  if (worker.joinable()) worker.join();  // runs what is queued first
}

Call Communicator::Impl::make_allreduce(const void* send, void* recv, std::size_t count,
                                        DataType type, ReduceOp op, const CallOptions& options) {
  auto bad = [](const std::string& why) {
    return Error(ErrorCode::invalid_argument, "allreduce: " + why);
  };
  if (!is_valid(type))
    throw bad(fmt::format("datatype {} is not a chorus::DataType", static_cast<int>(type)));
  if (!is_valid(op))
    throw bad(fmt::format("op {} is not a chorus::ReduceOp", static_cast<int>(op)));
  if (!is_supported(type, op))
    throw bad(fmt::format("op {} is not defined for {}", to_string(op), to_string(type)));
  if (!is_valid(options.algorithm))
    throw bad(fmt::format("algorithm {} is not a chorus::Algorithm",
                          static_cast<int>(options.algorithm)));
  const std::size_t esize = size_of(type);
  if (count > std::numeric_limits<std::size_t>::max() / esize)
    throw bad(fmt::format("count {} of {} overflows the address space", count, to_string(type)));
  const std::size_t bytes = count * esize;
  if (bytes > 0 && send == nullptr) throw bad(fmt::format("send buffer is null but count is {}", count));
  if (bytes > 0 && recv == nullptr) throw bad(fmt::format("recv buffer is null but count is {}", count));
  if (send != recv && overlaps(send, bytes, recv, bytes))
    throw bad("send and recv buffers overlap without being the same (in place means send == recv)");

  const int p = transport->size();
  const coll::Choice choice = choose(options.algorithm, bytes);

  Call call{};
  call.signature.kind = static_cast<std::uint8_t>(coll::CollectiveKind::allreduce);
  call.signature.datatype = static_cast<std::uint8_t>(type);
  call.signature.op = static_cast<std::uint8_t>(op);
  call.signature.algorithm = static_cast<std::uint8_t>(choice.variant);
  call.signature.count = count;
  call.variant = choice.variant;
  call.send = send;
  call.recv = recv;
  call.count = count;
  call.type = type;
  call.op = op;

  if (log::enabled(log::Level::info)) {
    const int size_class = static_cast<int>(std::bit_width(bytes));
    std::lock_guard lock(submit_mutex);
    if (logged_choices.emplace(size_class, choice.variant).second) {
      std::string others;
      for (int v = 0; v < coll::kVariantCount; ++v) {
        const auto variant = static_cast<coll::Variant>(v);
        if (variant == choice.variant) continue;
        others += fmt::format(" {} {:.1f}", to_string(variant),
                              us(coll::predicted_seconds(variant, selector->model(), bytes, p)));
      }
      log::info("allreduce of {} bytes on {} ranks (size class {}): {} by {}, predicted {:.1f} us "
                "(others, us:{})",
                bytes, p, size_class, to_string(choice.variant), choice.reason,
                us(choice.predicted_seconds), others);
    }
  }
  return call;
}

Call Communicator::Impl::make_call(coll::CollectiveKind kind, const void* send, void* recv,
                                   std::size_t count, DataType type, ReduceOp op, int root,
                                   const CallOptions& options) {
  using coll::CollectiveKind;
  const std::string_view name = coll::to_string(kind);
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::invalid_argument, fmt::format("{}: {}", name, why));
  };
  if (options.algorithm != Algorithm::automatic)
    throw bad(fmt::format("CallOptions::algorithm = {}: choosing the algorithm is for allreduce "
                          "only", to_string(options.algorithm)));
  const int p = transport->size(), me = transport->rank();
  Call call{};
  call.kind = kind;
  call.send = send;
  call.recv = recv;
  call.count = count;
  call.type = type;
  call.op = op;
  call.signature.kind = static_cast<std::uint8_t>(kind);
  auto method = [&](coll::Method m) { call.signature.algorithm = static_cast<std::uint8_t>(m); };
  if (kind == CollectiveKind::barrier) {
    call.count = 0;
    method(coll::Method::dissemination);
    return call;
  }
  if (!is_valid(type))
    throw bad(fmt::format("datatype {} is not a chorus::DataType", static_cast<int>(type)));
  if (coll::reduces(kind)) {
    if (!is_valid(op)) throw bad(fmt::format("op {} is not a chorus::ReduceOp", static_cast<int>(op)));
    if (!is_supported(type, op))
      throw bad(fmt::format("op {} is not defined for {}", to_string(op), to_string(type)));
  } else {
    call.op = ReduceOp::sum;  // not part of the call: kept out of the signature
  }
  const bool rooted = kind == CollectiveKind::broadcast || kind == CollectiveKind::reduce;
  if (rooted && (root < 0 || root >= p))
    throw bad(fmt::format("root {} is not a rank of this communicator (0..{})", root, p - 1));
  // Buffers of size() blocks: allgather's recv, reduce_scatter's send and
  // alltoall's both.
  const std::size_t esize = size_of(type);
  const auto blocks = static_cast<std::size_t>(p);
  if (count > std::numeric_limits<std::size_t>::max() / esize / blocks)
    throw bad(fmt::format("count {} of {} on {} ranks overflows the address space", count,
                          to_string(type), p));
  const std::size_t block = count * esize, all = block * blocks;
  auto need = [&](const void* buffer, const char* what, std::size_t bytes) {
    if (bytes > 0 && buffer == nullptr)
      throw bad(fmt::format("{} is null but count is {}", what, count));
  };
  const auto* send_bytes = static_cast<const std::byte*>(send);
  auto* recv_bytes = static_cast<std::byte*>(recv);
  const std::size_t my_block = static_cast<std::size_t>(me) * block;
  switch (kind) {
    case CollectiveKind::broadcast:
      need(recv, "buffer", block);
      call.send = recv;
      method(coll::broadcast_method(block, p));
      break;
    case CollectiveKind::reduce:
      need(send, "send buffer", block);
      if (me == root) need(recv, "recv buffer (at the root)", block);
      if (me == root && send != recv && overlaps(send, block, recv, block))
        throw bad("send and recv buffers overlap without being the same (in place means send == recv)");
      method(coll::Method::binomial_tree);
      break;
    case CollectiveKind::allgather:
      need(send, "send buffer", block);
      need(recv, "recv buffer", all);
      if (send_bytes != recv_bytes + my_block && overlaps(send, block, recv, all))
        throw bad("send overlaps recv without being this rank's block of it (in place means "
                  "send == recv + rank * count)");
      method(coll::Method::ring);
      break;
    case CollectiveKind::reduce_scatter:
      need(send, "send buffer", all);
      need(recv, "recv buffer", block);
      if (recv_bytes != send_bytes + my_block && overlaps(send, all, recv, block))
        throw bad("recv overlaps send without being this rank's block of it (in place means "
                  "recv == send + rank * count)");
      method(coll::Method::ring);
      break;
    case CollectiveKind::alltoall:
      need(send, "send buffer", all);
      need(recv, "recv buffer", all);
      if (overlaps(send, all, recv, all)) throw bad("send and recv buffers overlap");
      method(coll::Method::pairwise);
      break;
    default:
      throw bad("not a collective of make_call");
  }
  call.root = rooted ? root : -1;
  call.signature.root = call.root;
  call.signature.datatype = static_cast<std::uint8_t>(type);
  call.signature.op = static_cast<std::uint8_t>(call.op);
  call.signature.count = count;
  return call;
}

void Communicator::Impl::run_algorithm(const coll::Collective& c, const Call& call) {
  using coll::CollectiveKind;
  switch (call.kind) {
    case CollectiveKind::allreduce:
      return coll::allreduce_function(call.variant)(c, call.send, call.recv, call.count,
                                                    call.type, call.op);
    case CollectiveKind::broadcast:
      return coll::broadcast(c, call.recv, call.count, call.type, call.root);
    case CollectiveKind::reduce:
      return coll::reduce_to_root(c, call.send, call.recv, call.count, call.type, call.op,
                                  call.root);
    case CollectiveKind::allgather:
      return coll::allgather(c, call.send, call.recv, call.count, call.type);
    case CollectiveKind::reduce_scatter:
      return coll::reduce_scatter(c, call.send, call.recv, call.count, call.type, call.op);
    case CollectiveKind::alltoall:
      return coll::alltoall(c, call.send, call.recv, call.count, call.type);
    case CollectiveKind::barrier:
      return coll::barrier(c);
  }
  throw Error(ErrorCode::internal, "a call of no known collective");
}

coll::Choice Communicator::Impl::choose(Algorithm requested, std::size_t bytes) const {
  if (forced_by_env || requested == Algorithm::automatic) requested = algorithm;
  return selector->choose(requested, bytes, transport->size());
}

std::string Communicator::Impl::describe(const Call& call) const {
  return fmt::format("rank {}: call #{}, {},", transport->rank(), call.sequence,
                     coll::describe(call.signature, coll::algorithm_name(call.signature.algorithm)));
}

Error Communicator::Impl::poisoned_error() const {
  std::lock_guard lock(error_mutex);
  return Error(first_error->code(), "the communicator is unusable after an earlier error: " +
                                        std::string(first_error->what()));
}

void Communicator::Impl::throw_poisoned() const { throw poisoned_error(); }

void Communicator::Impl::run(const Call& call) {
  std::lock_guard run_lock(run_mutex);
  if (poisoned.load()) throw_poisoned();
  const auto deadline = transport::deadline_after(timeout_seconds);
  coll::Collective c{*transport, call.sequence, deadline, nullptr, &abort_requested, &scratch};
  // Declared outside the try: its posted receive must not outlive its
  // buffer, and the transport is aborted in the catch before it goes.
  std::optional<coll::CallCheck> check;
  const auto start = transport::Clock::now();
  try {
    if (check_calls) {
      check.emplace(c, call.signature, coll::algorithm_name);
      c.check = &*check;
    }
    run_algorithm(c, call);
    if (check) {
      try {
        check->finish(deadline);
      } catch (const Error& e) {
        c.fail(e);
      }
    }
  } catch (const std::exception& e) {
    const auto* error = dynamic_cast<const Error*>(&e);
    const ErrorCode code = error ? error->code() : ErrorCode::internal;
    Error failure(code, fmt::format("{} failed: {}", describe(call), e.what()));
    {
      std::lock_guard lock(error_mutex);
      if (!first_error) first_error = failure;
      poisoned.store(true);
    }
    log::warn("{}", failure.what());
    transport->abort(failure.what());  // again is harmless; ends what a bare throw left
    throw failure;
  }
  const double seconds = std::chrono::duration<double>(transport::Clock::now() - start).count();
  std::lock_guard lock(counters_mutex);
  auto add = [&](Counters::Entry& e) {
    e.calls += 1;
    e.bytes += call.count * size_of(call.type);
    e.seconds += seconds;
  };
  add(counters.total);
  if (call.kind == coll::CollectiveKind::allreduce)
    add(counters.by_algorithm[static_cast<std::size_t>(coll::family(call.variant))]);
}

void Communicator::Impl::wait_for_queue_drain(std::unique_lock<std::mutex>& queue_lock) {
  queue_cv.wait(queue_lock, [&] { return queue.empty() && !worker_busy; });
}

void Communicator::Impl::submit(const Call& prepared) {
  std::lock_guard submit(submit_mutex);
  if (poisoned.load()) throw_poisoned();
  Call call = prepared;
  call.sequence = next_sequence++;
  {
    std::unique_lock queue_lock(queue_mutex);
    wait_for_queue_drain(queue_lock);  // earlier async calls run first
  }
  run(call);
}

Work Communicator::Impl::submit_async(const Call& prepared) {
  auto state = std::make_shared<Work::State>();
  std::lock_guard submit(submit_mutex);
  if (poisoned.load()) {
    state->finish(poisoned_error());
    return Work(state);
  }
  Call call = prepared;
  call.sequence = next_sequence++;
  {
    std::lock_guard queue_lock(queue_mutex);
    if (!worker.joinable()) worker = std::thread([this] { worker_loop(); });
    queue.emplace_back(call, state);
  }
  queue_cv.notify_all();
  return Work(state);
}

void Communicator::Impl::worker_loop() {
  std::unique_lock lock(queue_mutex);
  for (;;) {
    queue_cv.wait(lock, [&] { return stopping || !queue.empty(); });
    if (queue.empty()) return;  // stopping, and everything queued has run
    auto [call, state] = std::move(queue.front());
    queue.pop_front();
    worker_busy = true;
    lock.unlock();
    std::optional<Error> error;
    try {
      run(call);
    } catch (const Error& e) {
      error = e;
    } catch (const std::exception& e) {
      error = Error(ErrorCode::internal, e.what());
    }
    state->finish(std::move(error));
    lock.lock();
    worker_busy = false;
    queue_cv.notify_all();
  }
}

void Communicator::Impl::abort(const std::string& reason) {
  const Error aborted(ErrorCode::aborted,
                      fmt::format("rank {}: the communicator was aborted: {}", transport->rank(), reason));
  {
    std::lock_guard lock(error_mutex);
    if (!first_error) first_error = aborted;
    poisoned.store(true);
  }
  abort_requested.store(true);
  // A running call sees abort_requested within one wake-up (<= 100 ms) and
  // aborts the transport itself; otherwise it is done here.
  if (std::unique_lock run_lock(run_mutex, std::try_to_lock); run_lock.owns_lock())
    transport->abort(reason);
  std::deque<std::pair<Call, std::shared_ptr<Work::State>>> dropped;
  {
    std::lock_guard lock(queue_mutex);
    dropped.swap(queue);
  }
  for (auto& [call, state] : dropped) state->finish(aborted);
  queue_cv.notify_all();
}

// ---- Communicator ------------------------------------------------------------

Communicator make_communicator(std::unique_ptr<transport::Transport> transport,
                               std::unique_ptr<bootstrap::Store> store, const Options& options) {
  return Communicator(std::make_unique<Communicator::Impl>(std::move(transport), std::move(store), options));
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

namespace {
void check_rank(int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("rank {} of size {}: need size >= 1 and 0 <= rank < size", rank, size));
}
}  // namespace

Communicator Communicator::from_env(const Options& options) {
  const auto info = bootstrap::launch_info_from_env();
  return connect(info.rank, info.size, info.store, options);
}

Communicator Communicator::connect(int rank, int size, const std::string& store_url,
                                   const Options& options) {
  check_rank(rank, size);
  const double timeout = options.timeout ? options.timeout->count() : bootstrap::timeout_seconds();
  const auto deadline = transport::deadline_after(timeout);
  const auto kind = options.transport.empty()
                        ? bootstrap::transport_kind_from_env()
                        : bootstrap::parse_transport_kind(options.transport, "Options::transport");
  // Each communicator of a process gets its own keys; every rank creates its
  // communicators in the same order, so the numbers agree.
  static std::atomic<int> generation{0};
  const std::string prefix = fmt::format("chorus/{}", generation.fetch_add(1));
  std::unique_ptr<bootstrap::Store> store;
  std::unique_ptr<transport::Transport> transport;
  if (size == 1) {  // a job of one needs no store and no network
    transport = std::make_unique<transport::LocalTransport>(transport::LocalFabric::create(1), 0);
  } else {
    store = bootstrap::open_store(store_url, rank == 0, deadline);
    transport = bootstrap::connect_transport(kind, rank, size, *store, prefix, deadline);
  }
  // The store is needed only to connect. Rank 0 may be serving it: it keeps
  // it until the end (its server waits for the clients to leave, which they
  // do now).
  if (rank != 0) store.reset();
  return make_communicator(std::move(transport), std::move(store), options);
}

namespace {

// Blobs of any length over a fixed-size all-gather: lengths first, then
// every blob padded to the longest.
bootstrap::BlobAllgather blobs_over(const Communicator::Allgather& allgather, int size) {
  return [&allgather, size](const transport::AddressBlob& mine) {
    const auto p = static_cast<std::size_t>(size);
    std::vector<std::uint64_t> lengths(p);
    const std::uint64_t my_length = mine.size();
    allgather(&my_length, sizeof my_length, lengths.data());
    const std::uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
    if (longest > (std::uint64_t{1} << 24))
      throw Error(ErrorCode::peer_failure,
                  fmt::format("address all-gather: a rank sent a {}-byte address", longest));
    std::vector<std::byte> padded(longest), all(longest * p);
    std::copy(mine.begin(), mine.end(), padded.begin());
    allgather(padded.data(), longest, all.data());
    std::vector<transport::AddressBlob> blobs(p);
    for (std::size_t r = 0; r < p; ++r) {
      const auto* begin = all.data() + r * longest;
      blobs[r].assign(begin, begin + lengths[r]);
    }
    return blobs;
  };
}

}  // namespace

Communicator Communicator::connect(int rank, int size, const Allgather& allgather,
                                   const Options& options) {
  check_rank(rank, size);
  if (!allgather) throw Error(ErrorCode::invalid_argument, "connect: the all-gather is empty");
  const double timeout = options.timeout ? options.timeout->count() : bootstrap::timeout_seconds();
  const auto kind = options.transport.empty()
                        ? bootstrap::transport_kind_from_env()
                        : bootstrap::parse_transport_kind(options.transport, "Options::transport");
  std::unique_ptr<transport::Transport> transport;
  if (size == 1)
    transport = std::make_unique<transport::LocalTransport>(transport::LocalFabric::create(1), 0);
  else
    transport = bootstrap::connect_transport(kind, rank, size, blobs_over(allgather, size),
                                             transport::deadline_after(timeout));
  return make_communicator(std::move(transport), nullptr, options);
}

int Communicator::rank() const { return impl_->transport->rank(); }
int Communicator::size() const { return impl_->transport->size(); }
std::string_view Communicator::transport_name() const { return impl_->transport->name(); }

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DataType type,
                             ReduceOp op, const CallOptions& options) {
  impl_->submit(impl_->make_allreduce(send, recv, count, type, op, options));
}

Work Communicator::allreduce_async(const void* send, void* recv, std::size_t count, DataType type,
                                   ReduceOp op, const CallOptions& options) {
  return impl_->submit_async(impl_->make_allreduce(send, recv, count, type, op, options));
}

using coll::CollectiveKind;

void Communicator::broadcast(void* buffer, std::size_t count, DataType type, int root,
                             const CallOptions& options) {
  impl_->submit(impl_->make_call(CollectiveKind::broadcast, nullptr, buffer, count, type, {}, root, options));
}
Work Communicator::broadcast_async(void* buffer, std::size_t count, DataType type, int root,
                                   const CallOptions& options) {
  return impl_->submit_async(
      impl_->make_call(CollectiveKind::broadcast, nullptr, buffer, count, type, {}, root, options));
}

void Communicator::reduce(const void* send, void* recv, std::size_t count, DataType type,
                          ReduceOp op, int root, const CallOptions& options) {
  impl_->submit(impl_->make_call(CollectiveKind::reduce, send, recv, count, type, op, root, options));
}
Work Communicator::reduce_async(const void* send, void* recv, std::size_t count, DataType type,
                                ReduceOp op, int root, const CallOptions& options) {
  return impl_->submit_async(
      impl_->make_call(CollectiveKind::reduce, send, recv, count, type, op, root, options));
}

void Communicator::allgather(const void* send, void* recv, std::size_t count, DataType type,
                             const CallOptions& options) {
  impl_->submit(impl_->make_call(CollectiveKind::allgather, send, recv, count, type, {}, -1, options));
}
Work Communicator::allgather_async(const void* send, void* recv, std::size_t count, DataType type,
                                   const CallOptions& options) {
  return impl_->submit_async(
      impl_->make_call(CollectiveKind::allgather, send, recv, count, type, {}, -1, options));
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                                  ReduceOp op, const CallOptions& options) {
  impl_->submit(
      impl_->make_call(CollectiveKind::reduce_scatter, send, recv, count, type, op, -1, options));
}
Work Communicator::reduce_scatter_async(const void* send, void* recv, std::size_t count,
                                        DataType type, ReduceOp op, const CallOptions& options) {
  return impl_->submit_async(
      impl_->make_call(CollectiveKind::reduce_scatter, send, recv, count, type, op, -1, options));
}

void Communicator::alltoall(const void* send, void* recv, std::size_t count, DataType type,
                            const CallOptions& options) {
  impl_->submit(impl_->make_call(CollectiveKind::alltoall, send, recv, count, type, {}, -1, options));
}
Work Communicator::alltoall_async(const void* send, void* recv, std::size_t count, DataType type,
                                  const CallOptions& options) {
  return impl_->submit_async(
      impl_->make_call(CollectiveKind::alltoall, send, recv, count, type, {}, -1, options));
}

void Communicator::barrier(const CallOptions& options) {
  impl_->submit(impl_->make_call(CollectiveKind::barrier, nullptr, nullptr, 0, {}, {}, -1, options));
}
Work Communicator::barrier_async(const CallOptions& options) {
  return impl_->submit_async(
      impl_->make_call(CollectiveKind::barrier, nullptr, nullptr, 0, {}, {}, -1, options));
}

void Communicator::abort(const std::string& reason) { impl_->abort(reason); }

std::optional<Error> Communicator::error() const {
  std::lock_guard lock(impl_->error_mutex);
  return impl_->first_error;
}

Counters Communicator::counters() const {
  std::lock_guard lock(impl_->counters_mutex);
  return impl_->counters;
}

void Communicator::check_spans(std::size_t send, std::size_t recv) {
  if (send != recv)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("allreduce: send has {} elements but recv has {}", send, recv));
}

}  // namespace chorus
