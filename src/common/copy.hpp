// Copying a collective's data: memcpy in pieces of 512 KiB.
//
// glibc 2.36's memcpy copies with `rep movsb` up to a "stop threshold",
// which on AMD CPUs it sets to the L2 cache's size (1 MiB per core here),
// and with a vector loop above it, up to the non-temporal threshold (24
// MiB here). On this machine the vector loop is the slower of the two at
// every size measured, cache-hot or not: one memcpy against 512 KiB pieces
// (bench/micro/copy_bench.cpp, best of 40): 1 MiB 21 against 17 us, 4
// MiB 100 against 77, 16 MiB 706 against 563, 64 MiB 3654 against 3224.
// Where a copy's source was just written by another core (a peer's slot
// in the host segment) the difference is larger: shm_two_shot at p = 2,
// 2 MiB, 375-460 against 263-295 us (docs/performance.md, eighth pass).
// Below 512 KiB nothing changes. Where glibc keeps `rep movsb` up to the
// non-temporal threshold (Intel CPUs), pieces change nothing below that
// threshold; above it they copy through the caches where one call would
// stream past them (here, at 64 MiB, that was the faster of the two).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace chorus {

inline constexpr std::size_t kCopyPieceBytes = 512 * 1024;

// memcpy(to, from, bytes) for buffers that do not overlap; 0 bytes may
// come with null pointers (a call of count 0), which memcpy does not allow.
inline void copy_memory(void* to, const void* from, std::size_t bytes) noexcept {
  auto* out = static_cast<std::byte*>(to);
  const auto* in = static_cast<const std::byte*>(from);
  for (std::size_t at = 0; at < bytes; at += kCopyPieceBytes)
    std::memcpy(out + at, in + at, std::min(kCopyPieceBytes, bytes - at));
}

}  // namespace chorus
