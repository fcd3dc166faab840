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

// Both directions compute every case and select the right one, without
// branches, so that loops over them vectorize (the generic kernels and the
// tails of the F16C ones rely on that).
inline float float16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = h & 0x7C00u;
  const std::uint32_t mantissa = h & 0x3FFu;
  // Normal: re-bias the exponent (15 -> 127).
  const std::uint32_t normal = (static_cast<std::uint32_t>(h & 0x7FFFu) << 13) + 0x38000000u;
  // Zero or subnormal: mantissa * 2^-24, exact in float.
  const std::uint32_t subnormal = float_to_bits(static_cast<float>(mantissa) * 0x1p-24f);
  // Infinity, or NaN made quiet.
  const std::uint32_t quiet = mantissa != 0 ? 0x00400000u : 0u;
  const std::uint32_t special = 0x7F800000u | quiet | (mantissa << 13);
  const std::uint32_t magnitude =
      exponent == 0x7C00u ? special : (exponent == 0 ? subnormal : normal);
  return bits_to_float(sign | magnitude);
}

inline std::uint16_t float_to_float16(float value) {
  const std::uint32_t bits = float_to_bits(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
  // NaN: quiet it, keep the payload's top bits.
  const std::uint32_t nan = 0x7E00u | ((magnitude >> 13) & 0x3FFu);
  // Normal range: re-bias the exponent (127 -> 15) and add just under half an
  // ulp plus the low bit, which is round-to-nearest-even on the bits shifted
  // out; a carry rounds up into the exponent, as it should.
  const std::uint32_t normal = (magnitude - 0x38000000u + 0xFFFu + ((magnitude >> 13) & 1u)) >> 13;
  // Subnormal or zero: adding 0.5 makes the FPU round at 2^-24, the spacing
  // of binary16 subnormals; what is left above 0.5 is the subnormal's bits.
  const std::uint32_t subnormal = float_to_bits(bits_to_float(magnitude) + 0.5f) - 0x3F000000u;
  const std::uint32_t half = magnitude > 0x7F800000u    ? nan
                             : magnitude >= 0x477FF000u ? 0x7C00u  // >= 65520: infinity
                             : magnitude >= 0x38800000u ? normal   // >= 2^-14
                                                        : subnormal;
  return static_cast<std::uint16_t>(sign | half);
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
