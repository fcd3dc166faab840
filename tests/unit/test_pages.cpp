// Mapping pages before their first touch (common/pages.hpp): a populated
// range is mapped before anything touches it, and fill_populated() leaves
// what a plain fill would.
#include "common/pages.hpp"
#include "../resident_pages.hpp"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <vector>

namespace chorus {
namespace {

using testing::resident_pages;

TEST(Pages, APopulatedRangeIsMappedBeforeItsFirstTouch) {
  constexpr std::size_t kBytes = 4 << 20;
  const auto pages = kBytes / static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* map = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  EXPECT_EQ(resident_pages(map, kBytes), 0u) << "a fresh mapping already mapped: nothing to compare";
  // From the middle of a page to the middle of another: every page touched.
  auto* bytes = static_cast<std::byte*>(map);
  const bool populated = populate_pages(bytes + 100, kBytes - 200);
  const std::size_t resident = resident_pages(map, kBytes);
  ::munmap(map, kBytes);
  if (!populated) GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE (Linux 5.14)";
  EXPECT_EQ(resident, pages);
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
