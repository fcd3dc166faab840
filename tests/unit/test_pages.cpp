// Mapping pages before their first touch (common/pages.hpp): a populated
// range is touched without a page fault, and fill_populated() leaves what a
// plain fill would.
#include "common/pages.hpp"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/resource.h>

#include <cstddef>
#include <cstring>

namespace chorus {
namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// A fresh mapping of `bytes`, written once, populated first or not; the
// minor faults that the writing took.
long faults_writing_a_mapping(std::size_t bytes, bool populate, bool& populated) {
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) ADD_FAILURE() << "mmap failed";
  populated = populate && populate_pages(map, bytes);
  const long before = minor_faults();
  std::memset(map, 1, bytes);
  const long taken = minor_faults() - before;
  ::munmap(map, bytes);
  return taken;
}

TEST(Pages, APopulatedRangeIsWrittenWithoutPageFaults) {
  constexpr std::size_t kBytes = 4 << 20;  // 1024 pages of 4 KiB
  bool populated = false;
  const long plain = faults_writing_a_mapping(kBytes, false, populated);
  const long after_populate = faults_writing_a_mapping(kBytes, true, populated);
  if (!populated) GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE (Linux 5.14)";
  // Unpopulated, every page (or every huge page, where the kernel backs the
  // range with them) faults on its first write; populated, none does.
  EXPECT_GE(plain, 2) << "the plain mapping's writes took no faults: nothing to compare";
  EXPECT_LE(after_populate, plain / 2) << "plain " << plain;
  EXPECT_LE(after_populate, 1);
}

TEST(Pages, FillPopulatedLeavesTheValuesAPlainFillWould) {
  std::vector<float> v = {7.0f};
  fill_populated(v, 300000, 2.5f);
  ASSERT_EQ(v.size(), 300000u);
  for (float x : v) ASSERT_EQ(x, 2.5f);
  std::vector<std::byte> zeros;
  fill_populated(zeros, 5);
  EXPECT_EQ(zeros, std::vector<std::byte>(5));
  EXPECT_TRUE(populate_pages(nullptr, 0));
}

}  // namespace
}  // namespace chorus
