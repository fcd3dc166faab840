// BiasedLock: the owner's plain-store way in, and the revocation that makes
// every thread after it take the mutex, never two holders at once.
#include "common/biased_lock.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace chorus {
namespace {

using namespace std::chrono_literals;

TEST(BiasedLock, OneThreadAloneKeepsTheBias) {
  BiasedLock lock;
  const bool supported =
      lock.biased();  // false where the kernel has no private expedited membarrier
  for (int i = 0; i < 1000; ++i) {
    std::lock_guard guard(lock);
  }
  EXPECT_EQ(lock.biased(), supported);
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
}

// Two threads take turns many times, the second starting while the first
// (the owner) is well under way: the count comes out whole, nobody was ever
// inside beside another, and the bias is gone.
TEST(BiasedLock, ASecondThreadRevokesTheBiasAndNeverEntersBesideTheOwner) {
  BiasedLock lock;
  constexpr int kEach = 200000;
  long long count = 0;  // guarded by the lock alone
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  std::atomic<bool> owner_started{false};
  const auto work = [&](bool owner) {
    for (int i = 0; i < kEach; ++i) {
      std::lock_guard guard(lock);
      if (inside.fetch_add(1) != 0) overlapped = true;
      ++count;
      if (owner && i == kEach / 4) owner_started = true;
      inside.fetch_sub(1);
    }
  };
  std::thread owner(work, true);
  while (!owner_started) std::this_thread::yield();
  std::thread other(work, false);
  owner.join();
  other.join();
  EXPECT_EQ(count, 2LL * kEach);
  EXPECT_FALSE(overlapped);
  EXPECT_FALSE(lock.biased());
}

// The owner holds the lock (its way in) when another thread asks: try_lock
// says no and lock() waits until the owner has let go.
TEST(BiasedLock, AnotherThreadWaitsForTheOwnerInside) {
  BiasedLock lock;
  std::atomic<bool> holding{false}, release{false};
  bool owner_done = false;  // written by the owner inside, read by the other once inside
  std::thread owner([&] {
    std::lock_guard guard(lock);
    holding = true;
    while (!release) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(20ms);
    owner_done = true;
  });
  while (!holding) std::this_thread::yield();
  EXPECT_FALSE(lock.try_lock());
  release = true;
  lock.lock();
  EXPECT_TRUE(owner_done);
  lock.unlock();
  owner.join();
  EXPECT_FALSE(lock.biased());
  EXPECT_TRUE(lock.try_lock());  // the mutex from now on, for the owner's thread too
  lock.unlock();
}

}  // namespace
}  // namespace chorus
