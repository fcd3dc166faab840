// How many pages of a range are mapped, asked without touching them: what
// the tests of populated memory (common/pages.hpp) compare.
#pragma once

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace chorus::testing {

// The pages of [data, data + bytes) that are resident (mincore(2); an
// anonymous page is once it has been touched or populated). Not by touching
// them, so that a sanitizer's shadow memory, which its interceptors fault
// in on every write, does not count.
inline std::size_t resident_pages(const void* data, std::size_t bytes) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(data) / page * page;
  const auto end = reinterpret_cast<std::uintptr_t>(data) + bytes;
  std::vector<unsigned char> in_core((end - begin + page - 1) / page);
  if (::mincore(reinterpret_cast<void*>(begin), end - begin, in_core.data()) != 0)
    ADD_FAILURE() << "mincore failed";
  std::size_t resident = 0;
  for (unsigned char c : in_core) resident += c & 1;
  return resident;
}

}  // namespace chorus::testing
