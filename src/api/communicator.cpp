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
#include <map>

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
                         std::unique_ptr<bootstrap::Store> s, const Options& options,
                         const coll::CostModel* inherited, bool split)
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
  // Threads share the log; a split communicator's rank is not the process's.
  if (transport->name() != "local" && !split) log::set_rank(transport->rank());

  // Every rank probes (so that ranks with and without a tuning file still
  // meet); a tuning file's model, when it has one, replaces the probe's.
  coll::CostModel model;
  std::string source = "parent communicator";
  if (inherited) {
    model = *inherited;
  } else {
    coll::Collective probe{*transport, 0, transport::deadline_after(timeout_seconds), nullptr,
                           &abort_requested, &scratch};
    const auto start = transport::Clock::now();
    model = coll::probe_cost_model(probe, check_calls);
    source = fmt::format("probe, {:.0f} ms",
                         std::chrono::duration<double, std::milli>(transport::Clock::now() - start)
                             .count());
  }
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

Call Communicator::Impl::make_call(coll::CollectiveKind kind, const CallArgs& a,
                                   const CallOptions& options) {
  using coll::BlockLayout;
  using coll::CollectiveKind;
  using coll::Method;
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
  call.send = a.send;
  call.recv = a.recv;
  call.count = a.count;
  call.type = a.type;
  call.op = a.op;
  call.signature.kind = static_cast<std::uint8_t>(kind);
  auto method = [&](Method m) { call.signature.algorithm = static_cast<std::uint8_t>(m); };
  if (kind == CollectiveKind::barrier) {
    call.count = 0;
    method(Method::dissemination);
    return call;
  }
  if (!is_valid(a.type))
    throw bad(fmt::format("datatype {} is not a chorus::DataType", static_cast<int>(a.type)));
  if (coll::reduces(kind)) {
    if (!is_valid(a.op)) throw bad(fmt::format("op {} is not a chorus::ReduceOp", static_cast<int>(a.op)));
    if (!is_supported(a.type, a.op))
      throw bad(fmt::format("op {} is not defined for {}", to_string(a.op), to_string(a.type)));
  } else {
    call.op = ReduceOp::sum;  // not part of the call: kept out of the signature
  }
  const bool rooted = kind == CollectiveKind::broadcast || kind == CollectiveKind::reduce ||
                      kind == CollectiveKind::gather || kind == CollectiveKind::gatherv ||
                      kind == CollectiveKind::scatter || kind == CollectiveKind::scatterv;
  if (rooted && (a.root < 0 || a.root >= p))
    throw bad(fmt::format("root {} is not a rank of this communicator (0..{})", a.root, p - 1));
  const bool at_root = me == a.root;
  const std::size_t esize = size_of(a.type);
  const auto ranks = static_cast<std::size_t>(p);
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  // `count` times p must fit (the uniform forms' buffers of p blocks).
  if (a.count > kMax / esize / ranks)
    throw bad(fmt::format("count {} of {} on {} ranks overflows the address space", a.count,
                          to_string(a.type), p));
  const std::size_t block = a.count * esize, all = block * ranks;
  auto need = [&](const void* buffer, const char* what, std::size_t bytes) {
    if (bytes > 0 && buffer == nullptr)
      throw bad(fmt::format("{} is null but holds {} bytes", what, bytes));
  };
  // `part` must be `slot` (in place) or lie apart from `whole`.
  auto slot_or_apart = [&](const void* part, std::size_t part_bytes, const void* whole,
                           std::size_t whole_bytes, const void* slot, const char* rule) {
    if (part != slot && overlaps(part, part_bytes, whole, whole_bytes)) throw bad(rule);
  };
  // A v-form's counts and displacements: p entries each (no displacements:
  // blocks back to back); sets `extent` to the bytes the blocks span.
  auto layout = [&](std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                    const char* counts_name, const char* displs_name, std::size_t& extent) {
    if (counts.size() != ranks)
      throw bad(fmt::format("{} has {} entries for {} ranks", counts_name, counts.size(), p));
    if (!displs.empty() && displs.size() != ranks)
      throw bad(fmt::format("{} has {} entries for {} ranks (or give none: blocks back to back)",
                            displs_name, displs.size(), p));
    BlockLayout blocks = displs.empty() ? BlockLayout::packed(counts) : BlockLayout{};
    if (!displs.empty()) {
      blocks.counts.assign(counts.begin(), counts.end());
      blocks.displs.assign(displs.begin(), displs.end());
    }
    extent = 0;
    std::size_t total = 0;
    for (std::size_t j = 0; j < ranks; ++j) {
      const std::size_t n = blocks.counts[j], at = blocks.displs[j];
      if (n > kMax / esize || at > kMax / esize - n || total > kMax / esize - n)
        throw bad(fmt::format("{}[{}] = {} at {} of {} overflows the address space", counts_name,
                              j, n, at, to_string(a.type)));
      total += n;
      if (n > 0) extent = std::max(extent, (at + n) * esize);
    }
    return blocks;
  };
  // Ranks must pass the same counts to allgatherv and reduce_scatter_v: the
  // call check compares their hash.
  auto sign_counts = [&](const std::vector<std::size_t>& counts) {
    std::uint64_t hash = 1469598103934665603ull, total = 0;  // FNV-1a
    for (std::size_t n : counts) {
      total += n;
      for (int byte = 0; byte < 8; ++byte) hash = (hash ^ ((n >> (8 * byte)) & 0xFF)) * 1099511628211ull;
    }
    call.signature.count = total;
    call.signature.layout = hash == 0 ? 1 : hash;
  };
  // The root's buffer of p blocks in gather(v) (recv) and scatter(v)
  // (send): equal blocks of count, or as counts and displs say; the root's
  // own block must be `count` elements, and its other buffer (`own`) is
  // that block (in place) or apart from them all.
  auto root_blocks = [&](const void* whole, const char* whole_name, const void* own,
                         const char* own_name, std::span<const std::size_t> counts,
                         std::span<const std::size_t> displs, const char* counts_name,
                         const char* displs_name, bool equal) {
    std::size_t extent = all;
    BlockLayout blocks = equal ? BlockLayout::uniform(p, a.count)
                               : layout(counts, displs, counts_name, displs_name, extent);
    need(whole, fmt::format("{} buffer (at the root)", whole_name).c_str(), extent);
    const std::size_t root_count = blocks.counts[static_cast<std::size_t>(me)];
    if (root_count != a.count)
      throw bad(fmt::format("the root's own block is {} elements ({}[{}]) but its {} count is {}",
                            root_count, counts_name, me, own_name, a.count));
    const auto* slot = static_cast<const std::byte*>(whole) + blocks.offset(me, esize);
    slot_or_apart(own, block, whole, extent, slot,
                  fmt::format("{} overlaps {} without being the root's block of it (in place "
                              "means {} == {} + the root's displacement)",
                              own_name, whole_name, own_name, whole_name).c_str());
    return blocks;
  };
  const auto* send_bytes = static_cast<const std::byte*>(a.send);
  auto* recv_bytes = static_cast<std::byte*>(a.recv);
  const std::size_t my_block = static_cast<std::size_t>(me) * block;
  call.signature.count = a.count;
  switch (kind) {
    case CollectiveKind::broadcast:
      need(a.recv, "buffer", block);
      call.send = a.recv;
      method(coll::broadcast_method(block, p));
      break;
    case CollectiveKind::reduce:
      need(a.send, "send buffer", block);
      if (at_root) need(a.recv, "recv buffer (at the root)", block);
      if (at_root && a.send != a.recv && overlaps(a.send, block, a.recv, block))
        throw bad("send and recv buffers overlap without being the same (in place means send == recv)");
      method(coll::reduce_method(block, p));
      break;
    case CollectiveKind::allgather:
      need(a.send, "send buffer", block);
      need(a.recv, "recv buffer", all);
      slot_or_apart(a.send, block, a.recv, all, recv_bytes + my_block,
                    "send overlaps recv without being this rank's block of it (in place means "
                    "send == recv + rank * count)");
      method(coll::allgather_method(block, p));
      break;
    case CollectiveKind::allgatherv: {
      std::size_t extent = 0;
      call.recv_blocks = layout(a.recv_counts, a.recv_displs, "recv_counts", "recv_displs", extent);
      const std::size_t mine = call.recv_blocks.bytes(me, esize);
      need(a.send, "send buffer", mine);
      need(a.recv, "recv buffer", extent);
      slot_or_apart(a.send, mine, a.recv, extent, recv_bytes + call.recv_blocks.offset(me, esize),
                    "send overlaps recv without being this rank's block of it (in place means "
                    "send == recv + recv_displs[rank])");
      call.count = call.recv_blocks.counts[static_cast<std::size_t>(me)];
      sign_counts(call.recv_blocks.counts);
      method(Method::ring);
      break;
    }
    case CollectiveKind::reduce_scatter:
      need(a.send, "send buffer", all);
      need(a.recv, "recv buffer", block);
      slot_or_apart(a.recv, block, a.send, all, send_bytes + my_block,
                    "recv overlaps send without being this rank's block of it (in place means "
                    "recv == send + rank * count)");
      method(coll::reduce_scatter_method(all, p));
      break;
    case CollectiveKind::reduce_scatter_v: {
      std::size_t extent = 0;
      call.recv_blocks = layout(a.recv_counts, {}, "recv_counts", "", extent);
      const std::size_t mine = call.recv_blocks.bytes(me, esize);
      need(a.send, "send buffer", extent);
      need(a.recv, "recv buffer", mine);
      slot_or_apart(a.recv, mine, a.send, extent, send_bytes + call.recv_blocks.offset(me, esize),
                    "recv overlaps send without being this rank's block of it (in place means "
                    "recv == send + the counts of the ranks before this one)");
      sign_counts(call.recv_blocks.counts);
      call.count = static_cast<std::size_t>(call.signature.count);
      method(coll::reduce_scatter_method(call.count * esize, p));
      break;
    }
    case CollectiveKind::alltoall:
      need(a.send, "send buffer", all);
      need(a.recv, "recv buffer", all);
      if (overlaps(a.send, all, a.recv, all)) throw bad("send and recv buffers overlap");
      method(coll::alltoall_method(block, p));
      break;
    case CollectiveKind::alltoallv: {
      std::size_t send_extent = 0, recv_extent = 0;
      call.send_blocks = layout(a.send_counts, a.send_displs, "send_counts", "send_displs", send_extent);
      call.recv_blocks = layout(a.recv_counts, a.recv_displs, "recv_counts", "recv_displs", recv_extent);
      need(a.send, "send buffer", send_extent);
      need(a.recv, "recv buffer", recv_extent);
      if (overlaps(a.send, send_extent, a.recv, recv_extent)) throw bad("send and recv buffers overlap");
      const auto self = static_cast<std::size_t>(me);
      if (call.send_blocks.counts[self] != call.recv_blocks.counts[self])
        throw bad(fmt::format("rank {} sends itself {} elements (send_counts[{}]) but expects {} "
                              "(recv_counts[{}])",
                              me, call.send_blocks.counts[self], me, call.recv_blocks.counts[self], me));
      call.count = 0;
      for (std::size_t n : call.send_blocks.counts) call.count += n;
      call.signature.count = 0;  // counts differ per rank: checked message by message
      method(Method::pairwise);
      break;
    }
    case CollectiveKind::gather:
    case CollectiveKind::gatherv:
      need(a.send, "send buffer", block);
      if (at_root)
        call.recv_blocks = root_blocks(a.recv, "recv", a.send, "send", a.recv_counts, a.recv_displs,
                                       "recv_counts", "recv_displs", kind == CollectiveKind::gather);
      if (kind == CollectiveKind::gatherv) call.signature.count = 0;  // checked message by message
      method(Method::linear);
      break;
    case CollectiveKind::scatter:
    case CollectiveKind::scatterv:
      need(a.recv, "recv buffer", block);
      if (at_root)
        call.send_blocks = root_blocks(a.send, "send", a.recv, "recv", a.send_counts, a.send_displs,
                                       "send_counts", "send_displs", kind == CollectiveKind::scatter);
      if (kind == CollectiveKind::scatterv) call.signature.count = 0;  // checked message by message
      method(Method::linear);
      break;
    default:
      throw bad("not a collective of make_call");
  }
  call.root = rooted ? a.root : -1;
  call.signature.root = call.root;
  call.signature.datatype = static_cast<std::uint8_t>(a.type);
  call.signature.op = static_cast<std::uint8_t>(call.op);
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
    case CollectiveKind::allgatherv:
      return coll::allgatherv(c, call.send, call.recv, call.recv_blocks, call.type);
    case CollectiveKind::reduce_scatter:
      return coll::reduce_scatter(c, call.send, call.recv, call.count, call.type, call.op);
    case CollectiveKind::reduce_scatter_v:
      return coll::reduce_scatter_v(c, call.send, call.recv, call.recv_blocks.counts, call.type,
                                    call.op);
    case CollectiveKind::alltoall:
      return coll::alltoall(c, call.send, call.recv, call.count, call.type);
    case CollectiveKind::alltoallv:
      return coll::alltoallv(c, call.send, call.send_blocks, call.recv, call.recv_blocks,
                             call.type);
    case CollectiveKind::gather:
    case CollectiveKind::gatherv:
      return coll::gatherv(c, call.send, call.count, call.recv, call.recv_blocks, call.type,
                           call.root);
    case CollectiveKind::scatter:
    case CollectiveKind::scatterv:
      return coll::scatterv(c, call.send, call.send_blocks, call.recv, call.count, call.type,
                            call.root);
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

// ---- split and dup -------------------------------------------------------------

namespace {

// In-process ranks (the local transport) meet at a fabric: the new group's
// rank 0 makes it and publishes its number; the others find it here. Entries
// live only while split() runs.
class LocalFabricRegistry {
 public:
  static LocalFabricRegistry& instance() {
    static LocalFabricRegistry registry;
    return registry;
  }
  std::uint64_t add(std::shared_ptr<transport::LocalFabric> fabric) {
    std::lock_guard lock(mutex_);
    fabrics_[++last_] = std::move(fabric);
    return last_;
  }
  std::shared_ptr<transport::LocalFabric> find(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    const auto it = fabrics_.find(id);
    return it == fabrics_.end() ? nullptr : it->second;
  }
  void remove(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    fabrics_.erase(id);
  }

 private:
  std::mutex mutex_;
  std::uint64_t last_ = 0;
  std::map<std::uint64_t, std::shared_ptr<transport::LocalFabric>> fabrics_;
};

}  // namespace

std::optional<Communicator> Communicator::split(int color, int key) {
  if (color < 0 && color != kNoColor)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("split: color {} is negative (kNoColor, -1, joins no communicator)", color));
  Impl& parent = *impl_;
  const int p = size(), me = rank();
  const auto ranks = static_cast<std::size_t>(p);
  // The parent's own collectives move everything: ordered and checked like
  // any call, and no store is involved.
  const Allgather over_parent = [this](const void* send, std::size_t bytes, void* recv) {
    allgather(send, recv, bytes, DataType::uint8);
  };

  // 1. Who joins whom: members of this rank's color, ordered by (key, rank).
  const std::int64_t mine[2] = {color, key};
  std::vector<std::int64_t> all(2 * ranks);
  allgather(mine, all.data(), 2, DataType::int64);
  std::vector<int> members;
  for (int j = 0; j < p && color >= 0; ++j)
    if (all[2 * static_cast<std::size_t>(j)] == color) members.push_back(j);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[2 * static_cast<std::size_t>(a) + 1] < all[2 * static_cast<std::size_t>(b) + 1];
  });
  const int new_size = static_cast<int>(members.size());
  const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());

  // 2. This rank's new transport and its address, or why it has none. Every
  // parent rank takes part in every exchange, in or out of a group, so that
  // one rank's failure never leaves another waiting.
  const bool in_process = parent.transport->name() == "local";
  std::unique_ptr<transport::Transport> t;
  std::shared_ptr<transport::LocalFabric> fabric;
  std::uint64_t fabric_id = 0;
  std::string failure;
  transport::AddressBlob blob(1, std::byte{1});  // first byte: 1 ready, 0 failed (then the reason)
  try {
    if (color >= 0 && new_size == 1) {
      t = std::make_unique<transport::LocalTransport>(transport::LocalFabric::create(1), 0);
    } else if (color >= 0 && in_process) {
      if (new_rank == 0) {
        fabric = transport::LocalFabric::create(new_size);
        fabric_id = LocalFabricRegistry::instance().add(fabric);
        t = std::make_unique<transport::LocalTransport>(fabric, 0);
        const auto* id = reinterpret_cast<const std::byte*>(&fabric_id);
        blob.insert(blob.end(), id, id + sizeof fabric_id);
      }
    } else if (color >= 0) {
      t = bootstrap::make_transport(
          bootstrap::parse_transport_kind(std::string(parent.transport->name()), "transport"),
          new_rank, new_size);
      const auto address = t->address();
      blob.insert(blob.end(), address.begin(), address.end());
    }
  } catch (const std::exception& e) {
    failure = e.what();
    blob.assign(1, std::byte{0});
    blob.insert(blob.end(), reinterpret_cast<const std::byte*>(failure.data()),
                reinterpret_cast<const std::byte*>(failure.data() + failure.size()));
  }
  struct ForgetFabric {
    std::uint64_t id;
    ~ForgetFabric() {
      if (id) LocalFabricRegistry::instance().remove(id);
    }
  } forget{fabric_id};
  const auto blobs = blobs_over(over_parent, p)(blob);

  // 3. Connect within the group, unless one of its members already failed.
  for (int m : members) {
    const auto& b = blobs[static_cast<std::size_t>(m)];
    if (failure.empty() && (b.empty() || b[0] != std::byte{1}))
      failure = fmt::format("rank {} could not make its transport: {}", m,
                            std::string(reinterpret_cast<const char*>(b.data()) + (b.empty() ? 0 : 1),
                                        b.size() - (b.empty() ? 0 : 1)));
  }
  if (failure.empty() && new_size > 1) {
    try {
      if (in_process) {
        if (new_rank != 0) {
          const auto& leader = blobs[static_cast<std::size_t>(members[0])];
          std::uint64_t id = 0;
          if (leader.size() == 1 + sizeof id) std::memcpy(&id, leader.data() + 1, sizeof id);
          fabric = LocalFabricRegistry::instance().find(id);
          if (!fabric) throw Error(ErrorCode::internal, "the group's in-process fabric is gone");
          t = std::make_unique<transport::LocalTransport>(fabric, new_rank);
        }
      } else {
        std::vector<transport::AddressBlob> addresses;
        for (int m : members) {
          const auto& b = blobs[static_cast<std::size_t>(m)];
          addresses.emplace_back(b.begin() + 1, b.end());
        }
        t->connect(addresses, transport::deadline_after(parent.timeout_seconds));
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }

  // 4. Every rank says whether it is ready; a group with a failed member
  // fails on all its members, naming it.
  const std::int32_t ready = failure.empty() ? 1 : 0;
  std::vector<std::int32_t> readiness(ranks);
  allgather(&ready, readiness.data(), 1, DataType::int32);
  for (int m : members)
    if (failure.empty() && readiness[static_cast<std::size_t>(m)] == 0)
      failure = fmt::format("rank {} could not connect", m);
  if (!failure.empty())
    throw Error(ErrorCode::transport_error,
                fmt::format("split(color={}, key={}) on rank {}: {}", color, key, me, failure));
  if (color < 0) return std::nullopt;

  Options options;
  options.algorithm = parent.algorithm;
  options.timeout = std::chrono::duration<double>(parent.timeout_seconds);
  const coll::CostModel* same_size_model = new_size == p ? &parent.selector->model() : nullptr;
  return Communicator(std::make_unique<Impl>(std::move(t), nullptr, options, same_size_model, true));
}

Communicator Communicator::dup() { return std::move(*split(0, rank())); }

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
  impl_->submit(impl_->make_call(CollectiveKind::broadcast,
                                 {.recv = buffer, .count = count, .type = type, .root = root}, options));
}
Work Communicator::broadcast_async(void* buffer, std::size_t count, DataType type, int root,
                                   const CallOptions& options) {
  return impl_->submit_async(impl_->make_call(
      CollectiveKind::broadcast, {.recv = buffer, .count = count, .type = type, .root = root}, options));
}

void Communicator::reduce(const void* send, void* recv, std::size_t count, DataType type,
                          ReduceOp op, int root, const CallOptions& options) {
  impl_->submit(impl_->make_call(
      CollectiveKind::reduce,
      {.send = send, .recv = recv, .count = count, .type = type, .op = op, .root = root}, options));
}
Work Communicator::reduce_async(const void* send, void* recv, std::size_t count, DataType type,
                                ReduceOp op, int root, const CallOptions& options) {
  return impl_->submit_async(impl_->make_call(
      CollectiveKind::reduce,
      {.send = send, .recv = recv, .count = count, .type = type, .op = op, .root = root}, options));
}

void Communicator::allgather(const void* send, void* recv, std::size_t count, DataType type,
                             const CallOptions& options) {
  impl_->submit(impl_->make_call(CollectiveKind::allgather,
                                 {.send = send, .recv = recv, .count = count, .type = type}, options));
}
Work Communicator::allgather_async(const void* send, void* recv, std::size_t count, DataType type,
                                   const CallOptions& options) {
  return impl_->submit_async(impl_->make_call(
      CollectiveKind::allgather, {.send = send, .recv = recv, .count = count, .type = type}, options));
}

void Communicator::allgatherv(const void* send, void* recv, std::span<const std::size_t> counts,
                              std::span<const std::size_t> displs, DataType type,
                              const CallOptions& options) {
  impl_->submit(impl_->make_call(
      CollectiveKind::allgatherv,
      {.send = send, .recv = recv, .type = type, .recv_counts = counts, .recv_displs = displs},
      options));
}
Work Communicator::allgatherv_async(const void* send, void* recv,
                                    std::span<const std::size_t> counts,
                                    std::span<const std::size_t> displs, DataType type,
                                    const CallOptions& options) {
  return impl_->submit_async(impl_->make_call(
      CollectiveKind::allgatherv,
      {.send = send, .recv = recv, .type = type, .recv_counts = counts, .recv_displs = displs},
      options));
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                                  ReduceOp op, const CallOptions& options) {
  impl_->submit(impl_->make_call(CollectiveKind::reduce_scatter,
                                 {.send = send, .recv = recv, .count = count, .type = type, .op = op},
                                 options));
}
Work Communicator::reduce_scatter_async(const void* send, void* recv, std::size_t count,
                                        DataType type, ReduceOp op, const CallOptions& options) {
  return impl_->submit_async(impl_->make_call(
      CollectiveKind::reduce_scatter,
      {.send = send, .recv = recv, .count = count, .type = type, .op = op}, options));
}

void Communicator::reduce_scatter_v(const void* send, void* recv,
                                    std::span<const std::size_t> counts, DataType type,
                                    ReduceOp op, const CallOptions& options) {
  impl_->submit(impl_->make_call(
      CollectiveKind::reduce_scatter_v,
      {.send = send, .recv = recv, .type = type, .op = op, .recv_counts = counts}, options));
}
Work Communicator::reduce_scatter_v_async(const void* send, void* recv,
                                          std::span<const std::size_t> counts, DataType type,
                                          ReduceOp op, const CallOptions& options) {
  return impl_->submit_async(impl_->make_call(
      CollectiveKind::reduce_scatter_v,
      {.send = send, .recv = recv, .type = type, .op = op, .recv_counts = counts}, options));
}

void Communicator::alltoall(const void* send, void* recv, std::size_t count, DataType type,
                            const CallOptions& options) {
  impl_->submit(impl_->make_call(CollectiveKind::alltoall,
                                 {.send = send, .recv = recv, .count = count, .type = type}, options));
}
Work Communicator::alltoall_async(const void* send, void* recv, std::size_t count, DataType type,
                                  const CallOptions& options) {
  return impl_->submit_async(impl_->make_call(
      CollectiveKind::alltoall, {.send = send, .recv = recv, .count = count, .type = type}, options));
}

void Communicator::alltoallv(const void* send, std::span<const std::size_t> send_counts,
                             std::span<const std::size_t> send_displs, void* recv,
                             std::span<const std::size_t> recv_counts,
                             std::span<const std::size_t> recv_displs, DataType type,
                             const CallOptions& options) {
  impl_->submit(impl_->make_call(CollectiveKind::alltoallv,
                                 {.send = send,
                                  .recv = recv,
                                  .type = type,
                                  .send_counts = send_counts,
                                  .send_displs = send_displs,
                                  .recv_counts = recv_counts,
                                  .recv_displs = recv_displs},
                                 options));
}
Work Communicator::alltoallv_async(const void* send, std::span<const std::size_t> send_counts,
                                   std::span<const std::size_t> send_displs, void* recv,
                                   std::span<const std::size_t> recv_counts,
                                   std::span<const std::size_t> recv_displs, DataType type,
                                   const CallOptions& options) {
  return impl_->submit_async(impl_->make_call(CollectiveKind::alltoallv,
                                              {.send = send,
                                               .recv = recv,
                                               .type = type,
                                               .send_counts = send_counts,
                                               .send_displs = send_displs,
                                               .recv_counts = recv_counts,
                                               .recv_displs = recv_displs},
                                              options));
}

void Communicator::gather(const void* send, void* recv, std::size_t count, DataType type,
                          int root, const CallOptions& options) {
  impl_->submit(impl_->make_call(
      CollectiveKind::gather,
      {.send = send, .recv = recv, .count = count, .type = type, .root = root}, options));
}
Work Communicator::gather_async(const void* send, void* recv, std::size_t count, DataType type,
                                int root, const CallOptions& options) {
  return impl_->submit_async(impl_->make_call(
      CollectiveKind::gather,
      {.send = send, .recv = recv, .count = count, .type = type, .root = root}, options));
}

void Communicator::gatherv(const void* send, std::size_t send_count, void* recv,
                           std::span<const std::size_t> recv_counts,
                           std::span<const std::size_t> recv_displs, DataType type, int root,
                           const CallOptions& options) {
  impl_->submit(impl_->make_call(CollectiveKind::gatherv,
                                 {.send = send,
                                  .recv = recv,
                                  .count = send_count,
                                  .type = type,
                                  .root = root,
                                  .recv_counts = recv_counts,
                                  .recv_displs = recv_displs},
                                 options));
}
Work Communicator::gatherv_async(const void* send, std::size_t send_count, void* recv,
                                 std::span<const std::size_t> recv_counts,
                                 std::span<const std::size_t> recv_displs, DataType type,
                                 int root, const CallOptions& options) {
  return impl_->submit_async(impl_->make_call(CollectiveKind::gatherv,
                                              {.send = send,
                                               .recv = recv,
                                               .count = send_count,
                                               .type = type,
                                               .root = root,
                                               .recv_counts = recv_counts,
                                               .recv_displs = recv_displs},
                                              options));
}

void Communicator::scatter(const void* send, void* recv, std::size_t count, DataType type,
                           int root, const CallOptions& options) {
  impl_->submit(impl_->make_call(
      CollectiveKind::scatter,
      {.send = send, .recv = recv, .count = count, .type = type, .root = root}, options));
}
Work Communicator::scatter_async(const void* send, void* recv, std::size_t count, DataType type,
                                 int root, const CallOptions& options) {
  return impl_->submit_async(impl_->make_call(
      CollectiveKind::scatter,
      {.send = send, .recv = recv, .count = count, .type = type, .root = root}, options));
}

void Communicator::scatterv(const void* send, std::span<const std::size_t> send_counts,
                            std::span<const std::size_t> send_displs, void* recv,
                            std::size_t recv_count, DataType type, int root,
                            const CallOptions& options) {
  impl_->submit(impl_->make_call(CollectiveKind::scatterv,
                                 {.send = send,
                                  .recv = recv,
                                  .count = recv_count,
                                  .type = type,
                                  .root = root,
                                  .send_counts = send_counts,
                                  .send_displs = send_displs},
                                 options));
}
Work Communicator::scatterv_async(const void* send, std::span<const std::size_t> send_counts,
                                  std::span<const std::size_t> send_displs, void* recv,
                                  std::size_t recv_count, DataType type, int root,
                                  const CallOptions& options) {
  return impl_->submit_async(impl_->make_call(CollectiveKind::scatterv,
                                              {.send = send,
                                               .recv = recv,
                                               .count = recv_count,
                                               .type = type,
                                               .root = root,
                                               .send_counts = send_counts,
                                               .send_displs = send_displs},
                                              options));
}

void Communicator::barrier(const CallOptions& options) {
  impl_->submit(impl_->make_call(CollectiveKind::barrier, {}, options));
}
Work Communicator::barrier_async(const CallOptions& options) {
  return impl_->submit_async(impl_->make_call(CollectiveKind::barrier, {}, options));
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
