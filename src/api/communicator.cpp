// The public Communicator and Work: shims onto the engine (core/engine.hpp).
#include "core/engine.hpp"
#include "common/wait_hook.hpp"

#include <fmt/format.h>

#include <limits>
#include <thread>

namespace chorus {

using coll::CollectiveKind;

Work::Work() = default;
Work::~Work() = default;
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&&) noexcept = default;
Work::Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

bool Work::test() const {
  if (!state_ || state_->done.load(std::memory_order_acquire)) return true;
  expedite();
  return false;
}

// A deferred call (CallOptions::deferred) that is tested, or waited for
// otherwise than by wait_progressing(), starts at once on the worker.
void Work::expedite() const {
  if (state_->deferred.load(std::memory_order_relaxed) && state_->queue_access)
    state_->queue_access->expedite(state_.get());
}

bool Work::wait(std::chrono::duration<double> timeout) {
  if (!state_) return true;
  // A call next in the queue runs here, on the waiting thread, rather than
  // be handed to the worker and back (which the waiting would only watch).
  if (!state_->done.load(std::memory_order_acquire) && state_->queue_access)
    state_->queue_access->run_if_next(state_.get(), timeout.count());
  // Ended (often: this thread just ran it). Its error was set before `done`
  // and never changes after: no lock, no clock read.
  if (state_->done.load(std::memory_order_acquire)) {
    if (state_->error) throw *state_->error;
    return true;
  }
  expedite();
  // Spin briefly (yielding) before sleeping: a small collective ends within
  // microseconds, less than a sleep and wake-up cost.
  const auto spin_end = std::chrono::steady_clock::now() +
                        std::min<std::chrono::steady_clock::duration>(
                            transport::spin_before_sleep(),
                            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::min(timeout, std::chrono::duration<double>(1.0))));
  while (!state_->done.load(std::memory_order_acquire) &&
         std::chrono::steady_clock::now() < spin_end)
    std::this_thread::yield();
  // Sleep, in the state's stripe (Work::State::watched says why).
  WaitingStripe& stripe = waiting_stripe(state_.get());
  state_->watched.store(true);
  std::unique_lock lock(stripe.mutex);
  const auto limit = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::min(timeout, std::chrono::duration<double>(std::chrono::hours(24 * 365))));
  if (!stripe.cv.wait_for(lock, limit, [&] { return state_->done.load(); })) return false;
  if (state_->error) throw *state_->error;
  return true;
}

void Work::wait_progressing(const std::function<void()>& progress) {
  if (!state_) return;
  if (!state_->done.load(std::memory_order_acquire) && state_->queue_access)
    state_->queue_access->run_if_next(state_.get(), 0, &progress);
  while (!wait(kHookedSleep)) progress();
}

std::optional<Error> Work::error() const {
  // Set once, by finish(), before `done`: no lock (settling a request asks
  // this of every call that ends).
  if (!state_ || !state_->done.load(std::memory_order_acquire)) return std::nullopt;
  return state_->error;
}

int Work::source() const {
  // Set before `done`, as the error.
  if (!state_ || !state_->done.load(std::memory_order_acquire)) return -1;
  return state_->error ? -1 : state_->source;
}

void Work::on_complete(std::function<void()> callback) {
  if (!callback) return;
  if (state_) {
    state_->watched.store(true);  // before `done` is read (Work::State::watched)
    std::unique_lock lock(waiting_stripe(state_.get()).mutex);
    if (!state_->done.load()) {
      state_->on_complete.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

namespace {
constexpr std::string_view kAlgorithmNames[kAlgorithmCount] = {
    "auto", "ring", "tree", "direct", "halving_doubling", "recursive_doubling", "shm",
    "hierarchical"};
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

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->transport->rank(); }
int Communicator::size() const { return impl_->transport->size(); }
std::string_view Communicator::transport_name() const { return impl_->transport->name(); }

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DataType type,
                             ReduceOp op, const CallOptions& options) {
  impl_->submit(impl_->make_call(
      CollectiveKind::allreduce,
      {.send = send, .recv = recv, .count = count, .type = type, .op = op}, options));
}

Work Communicator::allreduce_async(const void* send, void* recv, std::size_t count, DataType type,
                                   ReduceOp op, const CallOptions& options) {
  return impl_->submit_async(impl_->make_call(
      CollectiveKind::allreduce,
      {.send = send, .recv = recv, .count = count, .type = type, .op = op}, options));
}

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

namespace {
// Bytes of a point-to-point message, or Error(invalid_argument) naming what
// is wrong; `any_source` allows Communicator::kAnySource as the peer.
std::size_t message_bytes(const char* what, const void* buffer, std::size_t count, DataType type,
                          int peer, int size, bool any_source) {
  if (!is_valid(type))
    throw Error(ErrorCode::invalid_argument, fmt::format("{}: invalid data type", what));
  if (!(peer >= 0 && peer < size) && !(any_source && peer == Communicator::kAnySource))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: peer {} is not a rank of this communicator of {}{}", what, peer,
                            size, any_source ? " (nor kAnySource)" : ""));
  if (count > std::numeric_limits<std::size_t>::max() / size_of(type))
    throw Error(ErrorCode::invalid_argument, fmt::format("{}: count {} overflows", what, count));
  if (buffer == nullptr && count > 0)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: buffer is null but count is {}", what, count));
  return count * size_of(type);
}
}  // namespace

void Communicator::send(const void* buffer, std::size_t count, DataType type, int peer,
                        std::uint32_t tag) {
  send_async(buffer, count, type, peer, tag).wait();
}
Work Communicator::send_async(const void* buffer, std::size_t count, DataType type, int peer,
                              std::uint32_t tag) {
  const std::size_t bytes = message_bytes("send", buffer, count, type, peer, size(), false);
  return impl_->post_send(buffer, bytes, peer, tag);
}
int Communicator::recv(void* buffer, std::size_t count, DataType type, int peer,
                       std::uint32_t tag) {
  Work work = recv_async(buffer, count, type, peer, tag);
  work.wait();
  return work.source();
}
Work Communicator::recv_async(void* buffer, std::size_t count, DataType type, int peer,
                              std::uint32_t tag) {
  const std::size_t bytes = message_bytes("recv", buffer, count, type, peer, size(), true);
  return impl_->post_receive(buffer, bytes, peer, tag);
}

void Communicator::abort(const std::string& reason) { impl_->abort(reason); }

std::optional<Error> Communicator::error() const {
  return impl_->error();
}

Counters Communicator::counters() const {
  return impl_->counters();
}

void Communicator::check_spans(std::size_t send, std::size_t recv) {
  if (send != recv)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("allreduce: send has {} elements but recv has {}", send, recv));
}

}  // namespace chorus
