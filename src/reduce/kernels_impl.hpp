// The kernels themselves, written once as plain loops and compiled once per
// instruction set (kernels_generic.cpp, kernels_avx2.cpp, kernels_avx512.cpp),
// where the compiler's vectorizer widens them to that set's registers. Only
// float16 conversion needs intrinsics (F16C / AVX-512F).
//
// Include only from a kernels_*.cpp that defines CHORUS_KERNEL_ISA first.
// Everything here is in that ISA's inline namespace and an unnamed namespace,
// and uses builtins rather than std:: function templates, so no code compiled
// for a wide ISA can be shared with (and executed by) another.
#pragma once

#ifndef CHORUS_KERNEL_ISA
#error "define CHORUS_KERNEL_ISA before including kernels_impl.hpp"
#endif

#include "reduce/float16.hpp"
#include "reduce/kernels.hpp"

#include <type_traits>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
// GCC 12's own avx512fintrin.h trips this inside _mm512_cvtph_ps.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace chorus::reduce {
inline namespace CHORUS_KERNEL_ISA {
namespace {

// Element access through memcpy: any alignment, no aliasing assumptions, and
// the vectorizer turns it into plain unaligned vector loads and stores.
template <class T>
inline T load(const void* base, std::size_t i) {
  T value;
  __builtin_memcpy(&value, static_cast<const unsigned char*>(base) + i * sizeof(T), sizeof(T));
  return value;
}
template <class T>
inline void store(void* base, std::size_t i, T value) {
  __builtin_memcpy(static_cast<unsigned char*>(base) + i * sizeof(T), &value, sizeof(T));
}
inline const void* offset(const void* base, std::size_t bytes) {
  return static_cast<const unsigned char*>(base) + bytes;
}
inline void* offset(void* base, std::size_t bytes) {
  return static_cast<unsigned char*>(base) + bytes;
}

// ---- element-wise operations ------------------------------------------------

template <class T>
using Unsigned = std::make_unsigned_t<T>;

template <class T>
struct Sum {
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>)  // wraps, as MPI does; no signed overflow
      return static_cast<T>(static_cast<Unsigned<T>>(a) + static_cast<Unsigned<T>>(b));
    else
      return a + b;
  }
};
template <class T>
struct Prod {
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(static_cast<Unsigned<T>>(a) * static_cast<Unsigned<T>>(b));
    else
      return a * b;
  }
};

// IEEE 754-2019 minimum/maximum: NaN if either is NaN, -0 < +0. Written with
// selects only, so that it vectorizes to compare-and-blend.
template <class T>
struct FloatBits;
template <>
struct FloatBits<float> {
  using type = std::uint32_t;
};
template <>
struct FloatBits<double> {
  using type = std::uint64_t;
};

template <class T>
struct Min {
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a < b ? a : b;
    } else {
      using Bits = typename FloatBits<T>::type;
      T r = a < b ? a : b;
      // Equal: only +0 and -0 differ in bits; OR-ing the bits makes -0 win.
      const T either_sign = __builtin_bit_cast(
          T, static_cast<Bits>(__builtin_bit_cast(Bits, a) | __builtin_bit_cast(Bits, b)));
      r = a == b ? either_sign : r;
      return (a != a || b != b) ? a + b : r;  // a + b is the quiet NaN
    }
  }
};
template <class T>
struct Max {
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a > b ? a : b;
    } else {
      using Bits = typename FloatBits<T>::type;
      T r = a > b ? a : b;
      // Equal: AND-ing the bits makes +0 win over -0.
      const T both_signs = __builtin_bit_cast(
          T, static_cast<Bits>(__builtin_bit_cast(Bits, a) & __builtin_bit_cast(Bits, b)));
      r = a == b ? both_signs : r;
      return (a != a || b != b) ? a + b : r;
    }
  }
};
template <class T>
struct BitAnd {
  static T apply(T a, T b) { return static_cast<T>(a & b); }
};
template <class T>
struct BitOr {
  static T apply(T a, T b) { return static_cast<T>(a | b); }
};
template <class T>
struct BitXor {
  static T apply(T a, T b) { return static_cast<T>(a ^ b); }
};

template <class T, template <class> class Op>
void reduce_native(void* dst, const void* a, const void* b, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i)
    store<T>(dst, i, Op<T>::apply(load<T>(a, i), load<T>(b, i)));
}

template <class T>
void divide_native(void* buf, std::size_t count, std::size_t divisor) {
  const T d = static_cast<T>(divisor);
  for (std::size_t i = 0; i < count; ++i) store<T>(buf, i, load<T>(buf, i) / d);
}

// ---- 16-bit floats: staged through float32 in blocks that stay in L1 -------

void float16_to_float32(const void* src, float* dst, std::size_t count) {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= count; i += 16)
    _mm512_storeu_ps(
        dst + i,
        _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(offset(src, 2 * i)))));
#endif
#if defined(__F16C__)
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(
        dst + i, _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(offset(src, 2 * i)))));
#endif
  for (; i < count; ++i) dst[i] = float16_to_float(load<std::uint16_t>(src, i));
}

void float32_to_float16(const float* src, void* dst, std::size_t count) {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= count; i += 16)
    _mm256_storeu_si256(static_cast<__m256i*>(offset(dst, 2 * i)),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
#if defined(__F16C__)
  for (; i + 8 <= count; i += 8)
    _mm_storeu_si128(static_cast<__m128i*>(offset(dst, 2 * i)),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < count; ++i) store<std::uint16_t>(dst, i, float_to_float16(src[i]));
}

void bfloat16_to_float32(const void* src, float* dst, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) dst[i] = bfloat16_to_float(load<std::uint16_t>(src, i));
}

void float32_to_bfloat16(const float* src, void* dst, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) store<std::uint16_t>(dst, i, float_to_bfloat16(src[i]));
}

// 2 KiB per staging buffer: large enough to amortize the loop, small enough
// that both stay in L1 next to the data streaming through.
constexpr std::size_t kStageElements = 512;

// float16 goes through F16C conversions into float32 staging buffers, one
// L1-sized block at a time: the vectorizer cannot fuse the intrinsics.
template <template <class> class Op>
void reduce_float16(void* dst, const void* a, const void* b, std::size_t count) {
  alignas(64) float fa[kStageElements];
  alignas(64) float fb[kStageElements];
  for (std::size_t done = 0; done < count; done += kStageElements) {
    const std::size_t n = count - done < kStageElements ? count - done : kStageElements;
    float16_to_float32(offset(a, 2 * done), fa, n);
    float16_to_float32(offset(b, 2 * done), fb, n);
    for (std::size_t i = 0; i < n; ++i) fa[i] = Op<float>::apply(fa[i], fb[i]);
    float32_to_float16(fa, offset(dst, 2 * done), n);
  }
}

void divide_float16(void* buf, std::size_t count, std::size_t divisor) {
  alignas(64) float f[kStageElements];
  const float d = static_cast<float>(divisor);
  for (std::size_t done = 0; done < count; done += kStageElements) {
    const std::size_t n = count - done < kStageElements ? count - done : kStageElements;
    float16_to_float32(offset(buf, 2 * done), f, n);
    for (std::size_t i = 0; i < n; ++i) f[i] = f[i] / d;
    float32_to_float16(f, offset(buf, 2 * done), n);
  }
}

// bfloat16 conversions are a shift and an integer rounding, cheap enough for
// the vectorizer to fuse with the operation into one pass.
template <template <class> class Op>
void reduce_bfloat16(void* dst, const void* a, const void* b, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const float x = bfloat16_to_float(load<std::uint16_t>(a, i));
    const float y = bfloat16_to_float(load<std::uint16_t>(b, i));
    store<std::uint16_t>(dst, i, float_to_bfloat16(Op<float>::apply(x, y)));
  }
}

void divide_bfloat16(void* buf, std::size_t count, std::size_t divisor) {
  const float d = static_cast<float>(divisor);
  for (std::size_t i = 0; i < count; ++i) {
    const float x = bfloat16_to_float(load<std::uint16_t>(buf, i));
    store<std::uint16_t>(buf, i, float_to_bfloat16(x / d));
  }
}

// ---- the table --------------------------------------------------------------

constexpr int index(ReduceOp op) { return static_cast<int>(op); }

template <class T>
void fill_native(KernelTable& table, DataType type) {
  ReduceFn* row = table.reduce[static_cast<int>(type)];
  row[index(ReduceOp::sum)] = &reduce_native<T, Sum>;
  row[index(ReduceOp::prod)] = &reduce_native<T, Prod>;
  row[index(ReduceOp::min)] = &reduce_native<T, Min>;
  row[index(ReduceOp::max)] = &reduce_native<T, Max>;
  if constexpr (std::is_integral_v<T>) {
    row[index(ReduceOp::band)] = &reduce_native<T, BitAnd>;
    row[index(ReduceOp::bor)] = &reduce_native<T, BitOr>;
    row[index(ReduceOp::bxor)] = &reduce_native<T, BitXor>;
  } else {
    row[index(ReduceOp::avg)] = &reduce_native<T, Sum>;
    table.divide[static_cast<int>(type)] = &divide_native<T>;
  }
}

struct Float16Kernels {
  template <template <class> class Op>
  static constexpr ReduceFn reduce = &reduce_float16<Op>;
  static constexpr DivideFn divide = &divide_float16;
};
struct BFloat16Kernels {
  template <template <class> class Op>
  static constexpr ReduceFn reduce = &reduce_bfloat16<Op>;
  static constexpr DivideFn divide = &divide_bfloat16;
};

// float16 and bfloat16: every floating-point op, computed in float32.
template <class Kernels>
void fill_16bit(KernelTable& table, DataType type) {
  ReduceFn* row = table.reduce[static_cast<int>(type)];
  row[index(ReduceOp::sum)] = Kernels::template reduce<Sum>;
  row[index(ReduceOp::prod)] = Kernels::template reduce<Prod>;
  row[index(ReduceOp::min)] = Kernels::template reduce<Min>;
  row[index(ReduceOp::max)] = Kernels::template reduce<Max>;
  row[index(ReduceOp::avg)] = Kernels::template reduce<Sum>;
  table.divide[static_cast<int>(type)] = Kernels::divide;
}

KernelTable make_kernel_table(const char* isa) {
  KernelTable table;
  table.isa = isa;
  fill_native<std::int8_t>(table, DataType::int8);
  fill_native<std::uint8_t>(table, DataType::uint8);
  fill_native<std::int32_t>(table, DataType::int32);
  fill_native<std::uint32_t>(table, DataType::uint32);
  fill_native<std::int64_t>(table, DataType::int64);
  fill_native<std::uint64_t>(table, DataType::uint64);
  fill_native<float>(table, DataType::float32);
  fill_native<double>(table, DataType::float64);
  fill_16bit<Float16Kernels>(table, DataType::float16);
  fill_16bit<BFloat16Kernels>(table, DataType::bfloat16);
  table.float16_to_float32 = &float16_to_float32;
  table.float32_to_float16 = &float32_to_float16;
  table.bfloat16_to_float32 = &bfloat16_to_float32;
  table.float32_to_bfloat16 = &float32_to_bfloat16;
  return table;
}

}  // namespace
}  // namespace CHORUS_KERNEL_ISA
}  // namespace chorus::reduce
