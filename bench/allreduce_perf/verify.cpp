#include "verify.hpp"

#include "reduce/float16.hpp"

#include <algorithm>
#include <cstring>

namespace chorus::perf {
namespace {

std::uint64_t mix(std::uint64_t i, std::uint64_t seed) {
  std::uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull + 1;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 29);
}

bool is_signed_or_float(DataType t) {
  return t == DataType::int8 || t == DataType::int32 || t == DataType::int64 ||
         is_floating_point(t);
}

// Rank r's value at element i, as an integer (all values are integers).
std::int64_t input_value(DataType type, ReduceOp op, int r, int ranks, std::size_t i,
                         std::uint64_t seed) {
  const std::uint64_t h = mix(i + static_cast<std::uint64_t>(r) * 7919u, seed);
  switch (op) {
    case ReduceOp::sum:
      return is_signed_or_float(type) ? static_cast<std::int64_t>(h % 3) - 1
                                      : static_cast<std::int64_t>(h % 2);
    case ReduceOp::prod:
      return is_signed_or_float(type) ? ((h & 1) ? -1 : 1) : static_cast<std::int64_t>(1 + (h & 1));
    case ReduceOp::min:
    case ReduceOp::max:
      return static_cast<std::int64_t>(h % 100) - (is_signed_or_float(type) ? 50 : 0);
    case ReduceOp::avg: {
      // a + d_r with sum of d_r over ranks 0: the mean is exactly a.
      const std::int64_t a = static_cast<std::int64_t>(mix(i, seed) % 3) - 1;
      const std::int64_t t = static_cast<std::int64_t>(mix(i * 3 + 1, seed) & 1);
      return a + (r == 0 ? -(ranks - 1) : 1) * t;
    }
    case ReduceOp::band:
    case ReduceOp::bor:
    case ReduceOp::bxor:
      return static_cast<std::int64_t>(h);
  }
  return 0;
}

std::int64_t expected_value(DataType type, ReduceOp op, int ranks, std::size_t i,
                            std::uint64_t seed) {
  if (op == ReduceOp::avg) return static_cast<std::int64_t>(mix(i, seed) % 3) - 1;
  std::uint64_t acc = static_cast<std::uint64_t>(input_value(type, op, 0, ranks, i, seed));
  for (int r = 1; r < ranks; ++r) {
    const auto v = static_cast<std::uint64_t>(input_value(type, op, r, ranks, i, seed));
    switch (op) {
      case ReduceOp::sum: acc += v; break;   // wraps like the integer types
      case ReduceOp::prod: acc *= v; break;  // +-1, or powers of two that wrap
      case ReduceOp::min:
        acc = static_cast<std::uint64_t>(std::min(static_cast<std::int64_t>(acc), static_cast<std::int64_t>(v)));
        break;
      case ReduceOp::max:
        acc = static_cast<std::uint64_t>(std::max(static_cast<std::int64_t>(acc), static_cast<std::int64_t>(v)));
        break;
      case ReduceOp::band: acc &= v; break;
      case ReduceOp::bor: acc |= v; break;
      case ReduceOp::bxor: acc ^= v; break;
      case ReduceOp::avg: break;
    }
  }
  return static_cast<std::int64_t>(acc);
}

// Stores integer v as element i of a buffer of `type` (integers wrap to the
// width, as the reduction does; floats are exact for these values).
void store(void* buffer, std::size_t i, DataType type, std::int64_t v) {
  auto put = [&](auto x) { std::memcpy(static_cast<std::byte*>(buffer) + i * sizeof x, &x, sizeof x); };
  switch (type) {
    case DataType::int8: put(static_cast<std::int8_t>(v)); break;
    case DataType::uint8: put(static_cast<std::uint8_t>(v)); break;
    case DataType::int32: put(static_cast<std::int32_t>(v)); break;
    case DataType::uint32: put(static_cast<std::uint32_t>(v)); break;
    case DataType::int64: put(static_cast<std::int64_t>(v)); break;
    case DataType::uint64: put(static_cast<std::uint64_t>(v)); break;
    case DataType::float16: put(reduce::float_to_float16(static_cast<float>(v))); break;
    case DataType::bfloat16: put(reduce::float_to_bfloat16(static_cast<float>(v))); break;
    case DataType::float32: put(static_cast<float>(v)); break;
    case DataType::float64: put(static_cast<double>(v)); break;
  }
}

}  // namespace

void fill_input(void* buffer, std::size_t count, DataType type, ReduceOp op, int rank, int ranks,
                std::uint64_t seed) {
  for (std::size_t i = 0; i < count; ++i)
    store(buffer, i, type, input_value(type, op, rank, ranks, i, seed));
}

void fill_expected(void* buffer, std::size_t count, DataType type, ReduceOp op, int ranks,
                   std::uint64_t seed) {
  for (std::size_t i = 0; i < count; ++i)
    store(buffer, i, type, expected_value(type, op, ranks, i, seed));
}

std::size_t count_wrong(const void* result, const void* expected, std::size_t count, DataType type) {
  const std::size_t esize = size_of(type);
  const auto* a = static_cast<const std::byte*>(result);
  const auto* b = static_cast<const std::byte*>(expected);
  if (std::memcmp(a, b, count * esize) == 0) return 0;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += std::memcmp(a + i * esize, b + i * esize, esize) != 0;
  return wrong;
}

}  // namespace chorus::perf
