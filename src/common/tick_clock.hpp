// Timestamps cheap enough to take on every call's path: the CPU's
// time-stamp counter where it runs at one rate whatever the core's sleep
// or frequency state (x86 with an invariant TSC), steady_clock elsewhere.
// Why: in a virtual machine steady_clock goes through kvm-clock's vDSO,
// about 30 ns a read here against 12 ns for the counter, and an 8-byte
// AllReduce on one host does only about 100 ns of its own work
// (docs/performance.md "Third pass").
//
// Ticks become seconds at the rate measured against steady_clock between
// the clock's creation and the conversion, so nothing is calibrated at
// start-up; a conversion within 1 ms of creation first waits out that 1 ms
// (only tests read counters that early).
#pragma once

#include <chrono>
#include <cstdint>

namespace chorus {

class TickClock {
 public:
  TickClock() noexcept;
  std::uint64_t now() const noexcept;
  // `ticks` (a difference of two now()) in seconds.
  double seconds(std::uint64_t ticks) const noexcept;
  // The same without waiting out the clock's first millisecond: the rate
  // then comes from less than 1 ms of ticks (close enough for a timeout).
  double seconds_roughly(std::uint64_t ticks) const noexcept;

 private:
  bool counter_;  // the time-stamp counter, else steady_clock's nanoseconds
  std::uint64_t start_ticks_;
  std::chrono::steady_clock::time_point start_time_;
};

// steady_clock's time read at the kernel's tick resolution (CLOCK_MONOTONIC_COARSE:
// up to a few milliseconds behind, 5 ns a read instead of 30): for
// deadlines of seconds, never for measuring.
std::chrono::steady_clock::time_point coarse_steady_now() noexcept;

}  // namespace chorus
