// Twenty-sixth pass (docs/performance.md): what a process's first access
// to a page of shared memory costs, and what mapping it in beforehand
// saves. A 1-MiB POSIX shared-memory object (posix_fallocate, mmap
// MAP_SHARED, as the host segment), prepared by MODE, then one 8-byte
// store and one load per page, timed: nanoseconds per page.
//   0: nothing   1: madvise(MADV_POPULATE_WRITE)   2: a read of every page
//   3: both (what Segment::attach does for the rings)
//
//   g++ -O2 -o page_first_touch page_first_touch.cpp && ./page_first_touch MODE
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  const int mode = argc > 1 ? std::atoi(argv[1]) : 0;
  constexpr std::size_t kBytes = 1 << 20, kPage = 4096;
  const std::string name = "/page_first_touch." + std::to_string(::getpid());
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ::shm_unlink(name.c_str());
  if (fd < 0 || ::posix_fallocate(fd, 0, kBytes) != 0) return 1;
  auto* base = static_cast<char*>(::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (base == MAP_FAILED) return 1;
  using Clock = std::chrono::steady_clock;
  const auto per_page = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::nano>(b - a).count() / (kBytes / kPage);
  };
  const auto t0 = Clock::now();
  if (mode == 1 || mode == 3) ::madvise(base, kBytes, MADV_POPULATE_WRITE);
  if (mode == 2 || mode == 3)
    for (std::size_t at = 0; at < kBytes; at += kPage) static_cast<void>(*(volatile char*)(base + at));
  const auto t1 = Clock::now();
  for (std::size_t at = 8; at < kBytes; at += kPage) *(volatile std::uint64_t*)(base + at) = 1;
  const auto t2 = Clock::now();
  std::uint64_t sum = 0;
  for (std::size_t at = 16; at < kBytes; at += kPage) sum += *(volatile std::uint64_t*)(base + at);
  const auto t3 = Clock::now();
  std::printf("mode %d: prepare %.0f ns a page, first store %.0f, then load %.0f\n", mode,
              per_page(t0, t1), per_page(t1, t2), per_page(t2, t3));
  return sum == 0 ? 0 : 1;
}
