// Scalar conversions between float32 and the two 16-bit float formats.
//
// Contract: float -> 16-bit rounds to nearest, ties to even (IEEE default);
// infinities stay infinities; a NaN stays a NaN of the same sign, quieted,
// with the top bits of its payload kept, exactly as x86 F16C instructions do
// (the vector kernels use them, and every path must give identical bits).
// Subnormals are converted exactly, never flushed.
//
// These functions live in an inline namespace named for the instruction set
// of the translation unit that includes them (CHORUS_KERNEL_ISA, set by
// kernels_avx2.cpp and friends). Each ISA's copy is thus a distinct symbol,
// and the linker can never hand an AVX-512-compiled copy to a generic caller.
#pragma once

#include <cstdint>

#ifndef CHORUS_KERNEL_ISA
#define CHORUS_KERNEL_ISA baseline
#endif

namespace chorus::reduce {
inline namespace CHORUS_KERNEL_ISA {

inline float bits_to_float(std::uint32_t bits) { return __builtin_bit_cast(float, bits); }
inline std::uint32_t float_to_bits(float value) { return __builtin_bit_cast(std::uint32_t, value); }

inline float float16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  const std::uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) {  // infinity, or NaN made quiet
    const std::uint32_t quiet = mantissa != 0 ? 0x00400000u : 0u;
    return bits_to_float(sign | 0x7F800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  return bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline std::uint16_t float_to_float16(float value) {
  const std::uint32_t bits = float_to_bits(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u)  // NaN: quiet it, keep the payload's top bits
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  if (magnitude >= 0x477FF000u)  // >= 65520 (half-way above 65504) rounds to infinity
    return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (magnitude >= 0x38800000u) {  // normal binary16 range
    const std::uint32_t odd = (magnitude >> 13) & 1u;
    // Re-bias the exponent (127 -> 15) and add just under half an ulp plus the
    // low bit, which is round-to-nearest-even on the bits shifted out.
    return static_cast<std::uint16_t>(sign | ((magnitude - 0x38000000u + 0xFFFu + odd) >> 13));
  }
  // Subnormal or zero: adding 0.5 makes the FPU round at 2^-24, the spacing of
  // binary16 subnormals; what is left above 0.5 is the subnormal's mantissa.
  const float shifted = bits_to_float(magnitude) + 0.5f;
  return static_cast<std::uint16_t>(sign | (float_to_bits(shifted) - 0x3F000000u));
}

inline float bfloat16_to_float(std::uint16_t b) {
  return bits_to_float(static_cast<std::uint32_t>(b) << 16);
}

inline std::uint16_t float_to_bfloat16(float value) {
  const std::uint32_t bits = float_to_bits(value);
  const std::uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (bits >> 16) | 0x0040u;
  // Branch-free so that loops over it vectorize.
  return static_cast<std::uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

}  // namespace CHORUS_KERNEL_ISA
}  // namespace chorus::reduce
