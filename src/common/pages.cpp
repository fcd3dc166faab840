#include "common/pages.hpp"

#include <cstdint>

#include <sys/mman.h>
#include <unistd.h>

namespace chorus {

bool populate_pages(void* data, std::size_t bytes) noexcept {
#ifdef MADV_POPULATE_WRITE
  if (data == nullptr || bytes == 0) return true;
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(data) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes + page - 1) / page * page;
  return ::madvise(reinterpret_cast<void*>(first), end - first, MADV_POPULATE_WRITE) == 0;
#else
  (void)data;
  (void)bytes;
  return false;
#endif
}

}  // namespace chorus
