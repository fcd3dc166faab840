// One memcpy against chorus::copy_memory (common/copy.hpp: memcpy in pieces
// of 512 KiB) at 512 KiB to 64 MiB, in one thread, cache-hot where the two
// buffers fit: the two alternate, `repetitions` times (40 by default) of 10
// copies each, and the best time of each, and their ratio, is printed.
// The ratio is what this machine's glibc gains or loses by staying below
// its memcpy's switch from `rep movsb` to a vector loop (common/copy.hpp).
//
//   copy_bench [repetitions]
#include "common/copy.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 40;
  std::printf("%10s %14s %14s %8s\n", "bytes", "memcpy_us", "pieces_us", "ratio");
  for (std::size_t bytes = 512 << 10; bytes <= (std::size_t{64} << 20); bytes *= 2) {
    std::vector<char> from(bytes, 1), to(bytes, 2);
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < repetitions; ++rep)
      for (int pieces = 0; pieces < 2; ++pieces) {
        const auto start = std::chrono::steady_clock::now();
        for (int k = 0; k < 10; ++k) {
          if (pieces) chorus::copy_memory(to.data(), from.data(), bytes);
          else std::memcpy(to.data(), from.data(), bytes);
          asm volatile("" : : "r"(to.data()) : "memory");  // keep every copy
        }
        const double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / 10;
        best[pieces] = std::min(best[pieces], us);
      }
    std::printf("%10zu %14.1f %14.1f %8.2f\n", bytes, best[0], best[1], best[0] / best[1]);
  }
}
