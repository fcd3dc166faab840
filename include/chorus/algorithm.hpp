// The AllReduce algorithms a caller may force (per call, per communicator, or
// for the whole process with CHORUS_ALGO); automatic lets the selector pick.
#pragma once

#include <chorus/export.hpp>

#include <cstdint>
#include <optional>
#include <string_view>

namespace chorus {

enum class Algorithm : std::uint8_t {
  automatic,
  ring,                // reduce-scatter + allgather around a ring: large buffers
  tree,                // double binary tree, pipelined: mid sizes, many ranks
  direct,              // all-to-all, one-shot or two-shot: tiny buffers, few ranks
  halving_doubling,    // Rabenseifner: mid to large, few ranks
  recursive_doubling,  // whole-buffer pairwise exchange: tiny buffers
  shared_memory,       // "shm": through memory shared by the ranks of one host: small buffers
  hierarchical,        // within each host, then across hosts, then within: ranks on many hosts
};
inline constexpr int kAlgorithmCount = 8;

// False for values outside the enumeration.
constexpr bool is_valid(Algorithm a) noexcept { return static_cast<int>(a) < kAlgorithmCount; }

// "auto", "ring", "tree", "direct", "halving_doubling", "recursive_doubling", "shm",
// "hierarchical".
CHORUS_API std::string_view to_string(Algorithm a) noexcept;
// The inverse of to_string ("automatic" is accepted for "auto").
CHORUS_API std::optional<Algorithm> parse_algorithm(std::string_view name) noexcept;

}  // namespace chorus
