// Mapping memory's pages before it is first touched.
//
// In a virtual machine a first touch can cost far more than the page's
// zeroing: here about 13 us a 4 KiB page (a zero-filled std::vector of
// 6 MiB took 16-18 ms), and about half that when the kernel maps the range
// in one call first (8.4 ms). The cost model's probe touched 9 MiB so at
// every communicator's creation (docs/performance.md "Twenty-second pass").
#pragma once

#include <cstddef>
#include <vector>

namespace chorus {

// Asks the kernel to map, writable, every page that [data, data + bytes)
// touches (madvise MADV_POPULATE_WRITE, Linux 5.14); returns whether it
// did. A hint: where the kernel cannot, the pages are mapped at their first
// touch as before.
bool populate_pages(void* data, std::size_t bytes) noexcept;

// `v` holding `n` copies of `value`, its pages mapped first. The elements
// lie where the vector's allocator puts them, as with a plain resize.
template <class T>
void fill_populated(std::vector<T>& v, std::size_t n, const T& value = T()) {
  v.clear();
  v.reserve(n);
  populate_pages(v.data(), n * sizeof(T));
  v.resize(n, value);
}

}  // namespace chorus
