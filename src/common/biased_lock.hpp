// A mutex for what one thread nearly always uses alone: a communicator's
// calls, made by one training loop or MPI rank. The first thread to lock it
// owns it, and while no other thread has locked it the owner's lock and
// unlock are plain stores and loads, where a mutex's are two locked
// instructions a call: each waits for every store before it to leave the
// core, and a small call's last store is the one its peer is polling for
// (as the communicator's run lock, p = 2, 8-32 B, 7 alternating runs:
// AllReduce 0.80-0.83 the time, reduce 0.88-0.92, broadcast 0.94-0.98;
// docs/performance.md "Tenth pass").
//
// Another thread's first lock revokes the owner's bias for good: it sets
// `biased_` false, and membarrier(2) makes every thread of the process
// fence, which stands in for the fence the owner does not do between
// saying it is inside and reading `biased_` (asymmetric Dekker: either the
// owner sees the revocation, or the revoker sees the owner inside and waits
// for it to leave). From then on every thread, the owner too, takes the
// mutex. Where the kernel has no private expedited membarrier, it is the
// mutex from the start.
//
// Meets Lockable (std::lock_guard, std::unique_lock with try_to_lock). Not
// recursive.
#pragma once

#include <atomic>
#include <mutex>
#include <thread>

namespace chorus {

class BiasedLock {
 public:
  BiasedLock() noexcept;
  BiasedLock(const BiasedLock&) = delete;
  BiasedLock& operator=(const BiasedLock&) = delete;

  void lock() {
    if (biased_.load(std::memory_order_relaxed) && enter_as_owner()) return;
    mutex_.lock();
    end_bias();
  }
  bool try_lock();
  void unlock() {
    if (held_as_owner_) {
      held_as_owner_ = false;
      owner_inside_.store(false, std::memory_order_release);
    } else {
      mutex_.unlock();
    }
  }
  // Whether the owner's bias still holds (for tests).
  bool biased() const noexcept { return biased_.load(std::memory_order_relaxed); }

 private:
  // The owner's way in, true if it got in; false for any other thread or
  // once the bias is revoked (then the caller takes the mutex).
  bool enter_as_owner() {
    const std::thread::id me = std::this_thread::get_id();
    std::thread::id owner = owner_.load(std::memory_order_relaxed);
    // The first lock claims the bias (a locked instruction, once).
    if (owner == std::thread::id{}) {
      if (owner_.compare_exchange_strong(owner, me, std::memory_order_relaxed)) owner = me;
    }
    if (owner != me) return false;
    owner_inside_.store(true, std::memory_order_relaxed);
    // Only the compiler is kept from reordering the store and the load: the
    // revoker's membarrier() makes this CPU fence between them.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (biased_.load(std::memory_order_relaxed)) {
      held_as_owner_ = true;
      return true;
    }
    owner_inside_.store(false, std::memory_order_release);
    return false;
  }
  // With mutex_ held: revokes the bias if it still holds, and waits for the
  // owner to leave if it is inside (it may have entered before the revocation).
  void end_bias();
  // Revokes the bias (mutex_ held); after it the owner is either seen inside
  // or will see the revocation.
  void revoke();

  std::atomic<bool> biased_;
  std::atomic<std::thread::id> owner_{};
  std::atomic<bool> owner_inside_{false};
  bool held_as_owner_ = false;  // written and read by the holder only
  std::mutex mutex_;
};

}  // namespace chorus
