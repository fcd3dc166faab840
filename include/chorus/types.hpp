// Element types and reduction operations understood by every collective.
//
// Contract:
//  - float16 is IEEE 754 binary16 and bfloat16 is the upper half of an IEEE
//    binary32; both are stored as raw 16-bit patterns and reduced in float32
//    with one round-to-nearest-even conversion back.
//  - Integer sum and prod wrap (two's complement), as in MPI; they never
//    saturate.
//  - band, bor and bxor are defined for integer types only.
//  - avg is defined for floating-point types only: an integer average would
//    have to pick a rounding that silently differs between libraries, so it
//    is rejected (use sum and divide).
//  - min and max on floating-point types follow IEEE 754-2019 minimum and
//    maximum: a NaN in any operand gives NaN, and -0 is smaller than +0, so
//    the result does not depend on the order in which ranks are combined.
#pragma once

#include <chorus/export.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

namespace chorus {

enum class DataType : std::uint8_t {
  int8,
  uint8,
  int32,
  uint32,
  int64,
  uint64,
  float16,
  bfloat16,
  float32,
  float64,
};
inline constexpr int kDataTypeCount = 10;

enum class ReduceOp : std::uint8_t { sum, prod, min, max, avg, band, bor, bxor };
inline constexpr int kReduceOpCount = 8;

// False for values outside the enumeration (say, a bad cast across the C ABI).
constexpr bool is_valid(DataType t) noexcept { return static_cast<int>(t) < kDataTypeCount; }
constexpr bool is_valid(ReduceOp op) noexcept { return static_cast<int>(op) < kReduceOpCount; }

// Bytes per element; 0 for an invalid value.
constexpr std::size_t size_of(DataType t) noexcept {
  switch (t) {
    case DataType::int8:
    case DataType::uint8:
      return 1;
    case DataType::float16:
    case DataType::bfloat16:
      return 2;
    case DataType::int32:
    case DataType::uint32:
    case DataType::float32:
      return 4;
    case DataType::int64:
    case DataType::uint64:
    case DataType::float64:
      return 8;
  }
  return 0;
}

constexpr bool is_floating_point(DataType t) noexcept {
  return t == DataType::float16 || t == DataType::bfloat16 || t == DataType::float32 ||
         t == DataType::float64;
}
constexpr bool is_integer(DataType t) noexcept { return is_valid(t) && !is_floating_point(t); }

// Whether `op` is defined on `t` (see the contract above).
constexpr bool is_supported(DataType t, ReduceOp op) noexcept {
  if (!is_valid(t) || !is_valid(op)) return false;
  switch (op) {
    case ReduceOp::band:
    case ReduceOp::bor:
    case ReduceOp::bxor:
      return is_integer(t);
    case ReduceOp::avg:
      return is_floating_point(t);
    default:
      return true;
  }
}

// Canonical lower-case names ("float32", "bxor"); "invalid" for bad values.
CHORUS_API std::string_view to_string(DataType t) noexcept;
CHORUS_API std::string_view to_string(ReduceOp op) noexcept;

// Parses canonical names and the common aliases of NCCL, nccl-tests and
// PyTorch ("half", "float", "double", "bf16", "int", "char", ...).
// Case-insensitive; nullopt when the name is unknown.
CHORUS_API std::optional<DataType> parse_datatype(std::string_view name) noexcept;
CHORUS_API std::optional<ReduceOp> parse_reduce_op(std::string_view name) noexcept;

// The DataType of a C++ element type, for typed overloads of the collectives.
template <class T>
struct datatype_of;
template <>
struct datatype_of<std::int8_t> : std::integral_constant<DataType, DataType::int8> {};
template <>
struct datatype_of<std::uint8_t> : std::integral_constant<DataType, DataType::uint8> {};
template <>
struct datatype_of<std::int32_t> : std::integral_constant<DataType, DataType::int32> {};
template <>
struct datatype_of<std::uint32_t> : std::integral_constant<DataType, DataType::uint32> {};
template <>
struct datatype_of<std::int64_t> : std::integral_constant<DataType, DataType::int64> {};
template <>
struct datatype_of<std::uint64_t> : std::integral_constant<DataType, DataType::uint64> {};
template <>
struct datatype_of<float> : std::integral_constant<DataType, DataType::float32> {};
template <>
struct datatype_of<double> : std::integral_constant<DataType, DataType::float64> {};
template <class T>
inline constexpr DataType datatype_of_v = datatype_of<std::remove_cv_t<T>>::value;

}  // namespace chorus
