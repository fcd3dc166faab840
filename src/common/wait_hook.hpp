// What a thread runs while Chorus waits for peers on it: the caller's own
// progress engine, for a call that Work::wait_progressing() runs on the
// waiting thread. An MPI library's MPI_Wait (libchorus_pmpi) must keep the
// program's other MPI requests moving while it waits, because a peer may
// need one of them before it reaches the collective; a wait that only
// watched Chorus's worker run the call cost a hand-off to the worker and
// back, about 8 us a call (docs/performance.md, "Thirteenth pass").
//
// Contract for every wait of Chorus (the host segment's, the transports'):
// with a hook set on the waiting thread, once the wait has not ended at
// once it calls the hook every kHookInterval while it spins, and sleeps at
// most kHookedSleep at a time, calling the hook between sleeps. The hook must not
// call Chorus on the same communicator; it may throw (the call then fails
// with that error, as on any error of a wait).
#pragma once

#include <chrono>
#include <functional>

namespace chorus {

// The longest a hooked wait sleeps between calls of its hook.
inline constexpr std::chrono::microseconds kHookedSleep{200};
// The time between two calls of a hook while a wait spins. A hook is not
// free: libchorus_pmpi's is an MPI_Iprobe, whose progress yields the core
// when Open MPI runs oversubscribed. Called every 16 polls, it made 8-byte
// nonblocking calls through the library at p = 4 on 2 cores take twice
// their blocking form's time (18 us a call against 9.5;
// docs/performance.md "Fifteenth pass").
inline constexpr std::chrono::microseconds kHookInterval{20};

namespace detail {
inline thread_local const std::function<void()>* wait_hook = nullptr;
}

// The hook of the calling thread, or null.
inline const std::function<void()>* current_wait_hook() noexcept { return detail::wait_hook; }

// Sets the calling thread's hook for its lifetime (the previous one after).
class ScopedWaitHook {
 public:
  explicit ScopedWaitHook(const std::function<void()>& hook) noexcept
      : previous_(detail::wait_hook) {
    detail::wait_hook = &hook;
  }
  ~ScopedWaitHook() { detail::wait_hook = previous_; }
  ScopedWaitHook(const ScopedWaitHook&) = delete;
  ScopedWaitHook& operator=(const ScopedWaitHook&) = delete;

 private:
  const std::function<void()>* previous_;
};

}  // namespace chorus
