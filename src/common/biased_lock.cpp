#include "common/biased_lock.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

namespace chorus {
namespace {

long membarrier(int command) { return ::syscall(SYS_membarrier, command, 0u, 0); }

// Registers this process for the private expedited membarrier, once; false
// where the kernel has none (the locks are then plain mutexes).
bool private_expedited_membarrier() {
  static const bool registered = [] {
    const long commands = membarrier(MEMBARRIER_CMD_QUERY);
    return commands > 0 && (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
           membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  }();
  return registered;
}

}  // namespace

BiasedLock::BiasedLock() noexcept : biased_(private_expedited_membarrier()) {}

void BiasedLock::revoke() {
  biased_.store(false, std::memory_order_seq_cst);
  // Every running thread of this process fences: the owner's store saying
  // it is inside is now visible here, or its next read of biased_ sees false.
  membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
}

void BiasedLock::end_bias() {
  if (biased_.load(std::memory_order_relaxed)) revoke();
  // The owner may be inside, having entered before the revocation: this
  // happens once in the lock's life, for at most the owner's current hold.
  for (int turns = 0; owner_inside_.load(std::memory_order_acquire); ++turns) {
    if (turns < 100)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool BiasedLock::try_lock() {
  if (biased_.load(std::memory_order_relaxed) && enter_as_owner()) return true;
  if (!mutex_.try_lock()) return false;
  if (biased_.load(std::memory_order_relaxed)) revoke();
  if (owner_inside_.load(std::memory_order_acquire)) {  // it will leave; not waited for here
    mutex_.unlock();
    return false;
  }
  return true;
}

}  // namespace chorus
