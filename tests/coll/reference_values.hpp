// Inputs whose reductions are exact in every datatype, and the sequential
// reference results the collectives' tests compare against.
#pragma once

#include "reduce/float16.hpp"
#include "reduce/reduce.hpp"

#include <chorus/types.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace chorus::testing {

using Bytes = std::vector<std::byte>;

// Element i of rank r: small integers (exact in every type, sums of up to
// 64 ranks too); for prod 1 or 2, so that products stay exact or overflow
// alike in any order.
inline Bytes values(DataType type, int r, std::size_t count, ReduceOp op, std::size_t salt = 0) {
  Bytes out(count * size_of(type));
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t k = i + static_cast<std::size_t>(r) * 3 + salt;
    const int v = op == ReduceOp::prod ? 1 + static_cast<int>(k % 2) : static_cast<int>(k % 5);
    std::byte* at = out.data() + i * size_of(type);
    auto put = [&](auto x) { std::memcpy(at, &x, sizeof x); };
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
  return out;
}

// op over ranks 0..p-1 of values(type, r, count, op, salt), in rank order.
inline Bytes reference(DataType type, int p, std::size_t count, ReduceOp op, std::size_t salt = 0) {
  Bytes acc = values(type, 0, count, op, salt);
  for (int r = 1; r < p; ++r) {
    const Bytes next = values(type, r, count, op, salt);
    if (count) reduce::reduce(acc.data(), next.data(), count, type, op);
  }
  if (op == ReduceOp::avg && count) reduce::divide(acc.data(), count, type, static_cast<std::size_t>(p));
  return acc;
}

}  // namespace chorus::testing
