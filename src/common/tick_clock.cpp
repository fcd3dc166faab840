#include "common/tick_clock.hpp"

#include <ctime>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#define CHORUS_HAS_TSC 1
#else
#define CHORUS_HAS_TSC 0
#endif

namespace chorus {
namespace {

bool invariant_counter() noexcept {
#if CHORUS_HAS_TSC
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // CPUID 0x80000007, EDX bit 8: the TSC ticks at a constant rate in every
  // P-, C- and T-state (Intel and AMD alike).
  if (__get_cpuid(0x80000007, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

std::uint64_t steady_nanoseconds() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

TickClock::TickClock() noexcept
    : counter_(invariant_counter()), start_ticks_(now()), start_time_(std::chrono::steady_clock::now()) {}

std::uint64_t TickClock::now() const noexcept {
#if CHORUS_HAS_TSC
  if (counter_) return __rdtsc();
#endif
  return steady_nanoseconds();
}

double TickClock::seconds(std::uint64_t ticks) const noexcept {
  if (counter_) {
    const auto elapsed = std::chrono::steady_clock::now() - start_time_;
    if (elapsed < std::chrono::milliseconds(1))
      std::this_thread::sleep_for(std::chrono::milliseconds(1) - elapsed);
  }
  return seconds_roughly(ticks);
}

double TickClock::seconds_roughly(std::uint64_t ticks) const noexcept {
  if (!counter_) return static_cast<double>(ticks) * 1e-9;
  const auto elapsed = std::chrono::steady_clock::now() - start_time_;
  const std::uint64_t elapsed_ticks = now() - start_ticks_;
  if (elapsed_ticks == 0) return 0;
  return static_cast<double>(ticks) * std::chrono::duration<double>(elapsed).count() /
         static_cast<double>(elapsed_ticks);
}

std::chrono::steady_clock::time_point coarse_steady_now() noexcept {
  timespec ts{};
  if (::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0) return std::chrono::steady_clock::now();
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
}

}  // namespace chorus
