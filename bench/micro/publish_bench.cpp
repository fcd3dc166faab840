// What a fenced publish costs in the host segment's exchange pattern,
// without Chorus around it: two threads, each with a ring of 64 entries of
// 256 bytes (as shm::Segment's), publish call s in their entry s % 64 and
// wait for the other's, 2 million rounds. "fenced" publishes with a seq_cst
// store (what the segment does without membarrier()), "fenceless" with a
// release store (with it). The two alternate, 5 times each by default; the
// medians and their ratio are printed. Pin nothing: the numbers move with
// where the two threads land (two hyperthreads of one core or two cores).
//
//   publish_bench [repetitions]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

struct alignas(256) Entry {
  std::atomic<unsigned long> sequence{0};
};
constexpr unsigned long kDepth = 64;
constexpr unsigned long kRounds = 2'000'000;

void relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Nanoseconds per round of the exchange.
double exchange(bool fenced) {
  std::vector<Entry> rings(2 * kDepth);
  auto rank = [&](int me) {
    Entry* mine = &rings[me * kDepth];
    const Entry* theirs = &rings[(1 - me) * kDepth];
    for (unsigned long s = 1; s <= kRounds; ++s) {
      if (fenced) mine[s % kDepth].sequence.store(s, std::memory_order_seq_cst);
      else mine[s % kDepth].sequence.store(s, std::memory_order_release);
      while (theirs[s % kDepth].sequence.load(std::memory_order_acquire) < s) relax();
    }
  };
  const auto start = std::chrono::steady_clock::now();
  std::thread peer(rank, 1);
  rank(0);
  peer.join();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
         kRounds;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::vector<double> fenced, fenceless;
  for (int i = 0; i < repetitions; ++i) {
    fenced.push_back(exchange(true));
    fenceless.push_back(exchange(false));
    std::printf("run %d: fenced %.1f ns/round, fenceless %.1f ns/round\n", i + 1, fenced.back(),
                fenceless.back());
  }
  std::printf("median: fenced %.1f ns, fenceless %.1f ns, fenceless / fenced %.2f\n",
              median(fenced), median(fenceless), median(fenceless) / median(fenced));
}
