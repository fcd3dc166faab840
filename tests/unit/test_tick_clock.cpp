// The clocks on every call's path (common/tick_clock.hpp): ticks convert to
// the seconds steady_clock measured, and the coarse clock is steady_clock's
// time, never ahead of it and at most a few ticks behind.
#include "common/tick_clock.hpp"

#include <gtest/gtest.h>

#include <thread>

namespace chorus {
namespace {

using namespace std::chrono;

TEST(TickClock, TicksBecomeTheSecondsThatPassed) {
  const TickClock clock;
  const auto before_time = steady_clock::now();
  const std::uint64_t before = clock.now();
  std::this_thread::sleep_for(milliseconds(30));
  const std::uint64_t after = clock.now();
  const double measured = duration<double>(steady_clock::now() - before_time).count();
  ASSERT_GT(after, before);
  const double seconds = clock.seconds(after - before);
  // The conversion's rate comes from steady_clock itself: only the reads'
  // own jitter separates the two.
  EXPECT_GE(seconds, 0.029);
  EXPECT_NEAR(seconds, measured, 0.2 * measured);
}

TEST(TickClock, AConversionRightAfterCreationIsStillRight) {
  const TickClock clock;  // converted within 1 ms of creation: it waits that out
  const std::uint64_t before = clock.now();
  const auto before_time = steady_clock::now();
  while (steady_clock::now() - before_time < microseconds(200)) {
  }
  const double seconds = clock.seconds(clock.now() - before);
  EXPECT_GE(seconds, 150e-6);
  EXPECT_LT(seconds, 0.1);
}

TEST(CoarseSteadyNow, IsSteadyClockAtTickResolution) {
  const auto coarse = coarse_steady_now();
  const auto precise = steady_clock::now();
  EXPECT_LE(coarse, precise);
  EXPECT_LT(precise - coarse, milliseconds(50));
}

}  // namespace
}  // namespace chorus
