// Reference conversions for the tests, independent of src/reduce: GCC's
// _Float16 (libgcc's correctly rounded software conversion).
#pragma once

#include <cstdint>
#include <cstring>

namespace chorus::reference {

inline std::uint16_t reference_float_to_float16(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  std::uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

inline float reference_float16_to_float(std::uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

}  // namespace chorus::reference
