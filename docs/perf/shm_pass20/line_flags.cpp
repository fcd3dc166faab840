// Twentieth pass (docs/performance.md): does a flag in every cache line
// (NCCL's LL idea) beat the host segment's layout for a small AllReduce?
// Two processes (fork) do a p = 2 one-shot AllReduce of N bytes of floats
// through shared memory, over and over, each through its own ring of 256
// entries, as the segment does, in one of two layouts:
//   header:   the call's number in a header at the entry's start, the data
//             after it (from byte 32), written first; the reader polls the
//             header, fetching the data lines while it waits, then reduces
//             (Chorus's entry, shm/segment.hpp);
//   per-line: every 64-byte line holds 56 data bytes and the call's number
//             in its last 8, stored after the data (x86 keeps stores in
//             order); the reader waits for each line's number, so it needs
//             no second fetch after a header.
// Both runs alternate in one launch; printed: the medians of each layout's
// mean time per call, and header / per-line.
//
//   g++ -O2 -march=native -std=c++20 -o line_flags line_flags.cpp
//   ./line_flags BYTES [CALLS [RUNS]]
#include <immintrin.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace {

constexpr int kDepth = 256;
constexpr std::size_t kEntry = 1024, kLine = 64, kLineData = 56, kHeader = 32;
struct Shared {
  alignas(64) std::atomic<std::uint64_t> start[2];
  alignas(64) unsigned char ring[2][kDepth][kEntry];
};

void prefetch_for_write(const void* p) { asm volatile("prefetchw %0" : : "m"(*(const char*)p)); }
std::atomic<std::uint64_t>& word(unsigned char* at) {
  return *reinterpret_cast<std::atomic<std::uint64_t>*>(at);
}

// Rank r's mean microseconds per call over `calls` calls numbered from `first`.
template <bool PerLine>
double run(Shared* shared, int r, std::size_t bytes, long calls, std::uint64_t first) {
  const std::size_t n = bytes / 4;
  std::vector<float> in(n, 1.0f + r), out(n);
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < calls; ++i) {
    const std::uint64_t s = first + i;
    unsigned char* mine = shared->ring[r][s % kDepth];
    unsigned char* peer = shared->ring[1 - r][s % kDepth];
    unsigned char* next = shared->ring[r][(s + 1) % kDepth];
    if (!PerLine) {
      std::memcpy(mine + kHeader, in.data(), bytes);
      word(mine).store(s, std::memory_order_release);
      for (std::size_t at = 0; at < kHeader + bytes; at += kLine) prefetch_for_write(next + at);
      while (word(peer).load(std::memory_order_acquire) != s) {
        for (std::size_t at = kLine; at < kHeader + bytes; at += kLine)
          __builtin_prefetch(peer + at, 0, 3);
        _mm_pause();
      }
      const float* theirs = reinterpret_cast<const float*>(peer + kHeader);
      for (std::size_t k = 0; k < n; ++k) out[k] = r == 0 ? in[k] + theirs[k] : theirs[k] + in[k];
    } else {
      const std::size_t lines = (bytes + kLineData - 1) / kLineData;
      const auto* source = reinterpret_cast<const unsigned char*>(in.data());
      for (std::size_t l = 0; l < lines; ++l) {
        std::memcpy(mine + l * kLine, source + l * kLineData, std::min(kLineData, bytes - l * kLineData));
        word(mine + l * kLine + kLineData).store(s, std::memory_order_release);
      }
      for (std::size_t l = 0; l < lines; ++l) prefetch_for_write(next + l * kLine);
      float theirs[kLineData / 4];
      for (std::size_t l = 0; l < lines; ++l) {
        while (word(peer + l * kLine + kLineData).load(std::memory_order_acquire) != s) _mm_pause();
        const std::size_t length = std::min(kLineData, bytes - l * kLineData), at = l * kLineData / 4;
        std::memcpy(theirs, peer + l * kLine, length);
        for (std::size_t k = 0; k < length / 4; ++k)
          out[at + k] = r == 0 ? in[at + k] + theirs[k] : theirs[k] + in[at + k];
      }
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  for (float v : out)
    if (v != 3.0f) std::fprintf(stderr, "rank %d: wrong result %g\n", r, v), std::exit(1);
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / static_cast<double>(calls);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t bytes = argc > 1 ? std::strtoul(argv[1], nullptr, 10) / 4 * 4 : 256;
  const long calls = argc > 2 ? std::atol(argv[2]) : 200000;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 7;
  if (bytes == 0 || bytes + kHeader > kEntry) return std::fprintf(stderr, "BYTES: 4 to %zu\n", kEntry - kHeader), 2;
  void* memory = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return std::perror("mmap"), 1;
  auto* shared = new (memory) Shared();
  const pid_t child = fork();
  if (child < 0) return std::perror("fork"), 1;
  const int r = child == 0 ? 1 : 0;
  std::uint64_t first = 1;
  std::vector<double> header, per_line;
  for (int run_index = 0; run_index < 2 * runs; ++run_index) {
    shared->start[r].store(first, std::memory_order_release);  // both begin together
    while (shared->start[1 - r].load(std::memory_order_acquire) < first) _mm_pause();
    const bool per = run_index % 2 == 1;
    (per ? per_line : header).push_back(per ? run<true>(shared, r, bytes, calls, first)
                                            : run<false>(shared, r, bytes, calls, first));
    first += calls + kDepth;  // numbers no entry holds yet
  }
  if (r == 1) return 0;
  waitpid(child, nullptr, 0);
  std::printf("%zu B: header %.3f us  per-line %.3f us  header/per-line %.2f\n", bytes, median(header),
              median(per_line), median(header) / median(per_line));
  return 0;
}
