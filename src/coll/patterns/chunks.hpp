// Near-equal chunking, written once: `count` elements cut into `parts`
// chunks whose sizes differ by at most one element (the first count % parts
// are one longer); some may be empty.
#pragma once

#include <algorithm>
#include <cstddef>

namespace chorus::coll {

struct NearEqualChunks {
  std::size_t count, parts;
  std::size_t size(std::size_t chunk) const {
    return count / parts + (chunk < count % parts ? 1 : 0);
  }
  // Elements before `chunk`; offset(parts) == count.
  std::size_t offset(std::size_t chunk) const {
    return chunk * (count / parts) + std::min(chunk, count % parts);
  }
};

}  // namespace chorus::coll
