#include "transport/transport.hpp"

#include <algorithm>
#include "common/config.hpp"

#include "common/logging.hpp"
#include "common/wait_hook.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <thread>

namespace chorus::transport {

std::string Request::describe() const {
  return fmt::format("{} rank {} (tag {:#x}, {} bytes)", is_send_ ? "send to" : "receive from",
                     peer_, tag_, bytes_);
}

bool Request::try_finish() noexcept {
  bool expected = false;
  return finishing_.compare_exchange_strong(expected, true, std::memory_order_acq_rel);
}

void Request::complete(std::size_t received_bytes) noexcept {
  if (!try_finish()) return;
  received_ = received_bytes;
  state_.store(State::complete, std::memory_order_release);
}

void Request::fail(ErrorCode code, std::string message) noexcept {
  if (!try_finish()) return;
  try {
    error_.emplace(code, message);
  } catch (...) {
    // Out of memory while failing: the state alone still says failed.
  }
  state_.store(State::failed, std::memory_order_release);
}

Transport::Transport(int rank, int size) : rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("rank {} of size {}: need 0 <= rank < size", rank, size));
}

bool lazy_by_setting(config::Variable variable, int size) {
  const auto mode = config::get(variable).value_or("auto");
  if (mode == "eager") return false;
  if (mode == "lazy") return true;
  if (mode != "auto")
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}='{}' is not one of auto, eager, lazy", config::name(variable), mode));
  return size > 64;
}

void Transport::connect_looking_up(const AddressBlob&, AddressLookup, Deadline) {
  throw Error(ErrorCode::unsupported,
              fmt::format("the {} transport needs every address at connect (it does not look "
                          "them up when first needed)",
                          name()));
}

void Transport::check_message(const char* what, int peer, Tag tag, const void* buf,
                              std::size_t bytes) const {
  if (peer < 0 || peer >= size_)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: peer {} is not a rank of this group of {}", what, peer, size_));
  if (tag > kMaxTag)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: tag {:#x} exceeds the largest tag {:#x}", what, tag, kMaxTag));
  if (buf == nullptr && bytes > 0)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: buffer is null but bytes is {}", what, bytes));
}

bool Transport::test(const Request& request) {
  if (!request.done()) progress();
  return request.done();
}

std::string truncation_message(int receiver, int sender, Tag tag, std::size_t sent,
                               std::size_t capacity) {
  return fmt::format(
      "rank {}: message from rank {} (tag {:#x}) has {} bytes but the receive buffer holds only "
      "{}; nothing was written",
      receiver, sender, tag, sent, capacity);
}

std::chrono::microseconds spin_before_sleep() {
  static const std::chrono::microseconds spin = [] {
    const char* env = config::raw(config::Variable::spin_us);
    if (env == nullptr || *env == '\0') return std::chrono::microseconds(50);
    char* end = nullptr;
    const long value = std::strtol(env, &end, 10);
    if (*end != '\0' || value < 0) {
      log::warn("CHORUS_SPIN_US='{}' is not a count of microseconds; using 50", env);
      return std::chrono::microseconds(50);
    }
    return std::chrono::microseconds(value);
  }();
  return spin;
}

Deadline deadline_after(double seconds) {
  seconds = seconds > 0 ? std::min(seconds, kMaxTimeoutSeconds) : 0.0;
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void Transport::wait(const Request& request, Deadline deadline,
                     const std::function<void()>& on_poll) {
  // The clock is read only once polling has found nothing for a while: a
  // request that ends within a few polls (every ping-pong message over
  // shared memory) costs no clock read at all.
  Clock::time_point start{};
  auto idle_since = start;
  unsigned idle_polls = 0;
  const std::function<void()>* hook = nullptr;  // read once the wait has lasted (wait_hook.hpp)
  Clock::time_point next_hook{};
  while (!request.done()) {
    const bool moved = progress();
    if (on_poll) on_poll();
    if (moved) {
      idle_polls = 0;
      continue;
    }
    // Poll without reading the clock or yielding at first: a message that is
    // about to land (shared memory answers in a fraction of a microsecond)
    // should not wait for a system call.
    if (++idle_polls < 64) continue;
    const auto now = Clock::now();
    if (idle_polls == 64) {
      idle_since = now;
      if (start == Clock::time_point{}) start = now;
      hook = current_wait_hook();
      next_hook = now + kHookInterval;
    }
    if (now >= deadline) {
      const double waited = std::chrono::duration<double>(now - start).count();
      throw Error(ErrorCode::timeout,
                  fmt::format("rank {}: timed out after {:.1f} s waiting for {} over {}", rank_,
                              waited, request.describe(), name()));
    }
    if (now - idle_since < spin_before_sleep()) {
      if (hook && now >= next_hook) {
        (*hook)();
        next_hook = now + kHookInterval;
      }
      if (idle_polls % 16 == 0) std::this_thread::yield();  // let an oversubscribed peer run
      continue;
    }
    // Wake at least every 100 ms: a bound on what a lost wake-up can cost
    // (with a hook, every kHookedSleep, to run it).
    const Clock::duration longest = hook ? Clock::duration(kHookedSleep)
                                         : Clock::duration(std::chrono::milliseconds(100));
    wait_for_activity(std::min(deadline, now + longest));
    if (hook) (*hook)();
    idle_polls = 0;
  }
  if (request.state() == Request::State::failed) {
    if (const Error* e = request.error()) throw *e;
    throw Error(ErrorCode::internal, request.describe() + " failed without an error");
  }
}

void Transport::wait_all(std::span<const RequestPtr> requests, Deadline deadline,
                         const std::function<void()>& on_poll) {
  // Any request's failure ends the wait, not only the one waited for: a
  // collective that posted messages to many peers must not sit on a healthy
  // peer's message (which may never come: that peer may be stuck on the same
  // failure) while another request already knows a peer is gone.
  const std::function<void()> poll = [&] {
    for (const auto& r : requests)
      if (const Error* e = r->error()) throw *e;
    if (on_poll) on_poll();
  };
  for (const auto& r : requests) wait(*r, deadline, poll);
}

}  // namespace chorus::transport
