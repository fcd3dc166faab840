// Eighteenth pass (docs/performance.md): 16 MiB from one process to
// another, three ways, in 256 KiB pieces, the reader's time per 16 MiB
// (median of 20):
//   slots  the writer copies each piece into one of 4 slots of shared
//          memory and the reader copies it out (the host segment's way:
//          two copies in user space, on two cores);
//   cma    the reader copies each piece from the writer's buffer with
//          process_vm_readv (cross-memory attach: Open MPI vader's one
//          copy, by the kernel);
//   local  the reader copies a buffer of its own (one copy, one core).
// With argument 1 both buffers are madvised for transparent huge pages.
//
//   g++ -O2 -std=c++20 -o cross_copy cross_copy.cpp && ./cross_copy 0 && ./cross_copy 1
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace {
using Clock = std::chrono::steady_clock;
constexpr std::size_t kBytes = 16 << 20, kPiece = 256 << 10, kSlots = 4, kPieces = kBytes / kPiece;
constexpr int kRepeats = 20, kDone = 1 << 30;

struct Shared {
  std::atomic<std::uint64_t> written{0}, read{0};
  std::atomic<int> go{0};
  char* writer_buffer = nullptr;  // in the writer's address space
  alignas(64) char slots[kSlots][kPiece];
};

char* buffer(bool huge) {
  auto* b = static_cast<char*>(std::aligned_alloc(2 << 20, kBytes));
  if (huge) madvise(b, kBytes, MADV_HUGEPAGE);
  std::memset(b, 1, kBytes);
  return b;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  const bool huge = argc > 1 && std::atoi(argv[1]) != 0;
  void* memory = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return 1;
  auto* s = new (memory) Shared;
  const pid_t writer = fork();
  if (writer == 0) {
    char* source = buffer(huge);
    s->writer_buffer = source;
    s->go.store(1);
    for (int repeat = 0; repeat < kRepeats; ++repeat) {
      while (s->go.load() != 2 + repeat) {
      }
      for (std::size_t k = 0; k < kPieces; ++k) {
        const std::uint64_t piece = repeat * kPieces + k;
        while (piece >= kSlots && s->read.load(std::memory_order_acquire) + kSlots <= piece) {
        }
        std::memcpy(s->slots[piece % kSlots], source + k * kPiece, kPiece);
        s->written.store(piece + 1, std::memory_order_release);
      }
    }
    while (s->go.load() != kDone) {  // the reader's cma reads this buffer
    }
    _exit(0);
  }
  while (s->go.load() != 1) {
  }
  char* target = buffer(huge);
  char* own = buffer(huge);
  std::vector<double> slots, cma, local;
  const auto us = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  for (int repeat = 0; repeat < kRepeats; ++repeat) {
    const auto t0 = Clock::now();
    s->go.store(2 + repeat);
    for (std::size_t k = 0; k < kPieces; ++k) {
      const std::uint64_t piece = repeat * kPieces + k;
      while (s->written.load(std::memory_order_acquire) <= piece) {
      }
      std::memcpy(target + k * kPiece, s->slots[piece % kSlots], kPiece);
      s->read.store(piece + 1, std::memory_order_release);
    }
    const auto t1 = Clock::now();
    for (std::size_t k = 0; k < kPieces; ++k) {
      iovec to{target + k * kPiece, kPiece}, from{s->writer_buffer + k * kPiece, kPiece};
      if (process_vm_readv(writer, &to, 1, &from, 1, 0) != static_cast<ssize_t>(kPiece)) {
        std::perror("process_vm_readv");
        return 1;
      }
    }
    const auto t2 = Clock::now();
    for (std::size_t k = 0; k < kPieces; ++k) std::memcpy(target + k * kPiece, own + k * kPiece, kPiece);
    const auto t3 = Clock::now();
    slots.push_back(us(t0, t1));
    cma.push_back(us(t1, t2));
    local.push_back(us(t2, t3));
  }
  s->go.store(kDone);
  waitpid(writer, nullptr, 0);
  std::printf("%s pages, 16 MiB: slots %.0f us, cma %.0f us, local memcpy %.0f us\n",
              huge ? "huge" : "4 KiB", median(slots), median(cma), median(local));
}
