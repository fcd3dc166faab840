// float16 / bfloat16 conversions: the scalar functions and every runnable
// ISA's vector versions, against references that share no code with them
// (GCC's _Float16 for binary16, a nearest-neighbour search for bfloat16).
#include "reduce/float16.hpp"
#include "reduce/reduce.hpp"
#include "reference_float16.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace chorus::reduce {
namespace {

using reference::reference_float16_to_float;
using reference::reference_float_to_float16;

// The bfloat16 nearest to f: the truncation or the next value up, ties to the
// even one; computed in double, where both candidates and f are exact.
std::uint16_t reference_float_to_bfloat16(float f) {
  std::uint32_t bits = float_to_bits(f);
  const std::uint16_t down = static_cast<std::uint16_t>(bits >> 16);
  if ((bits & 0xFFFFu) == 0) return down;
  const std::uint16_t up = static_cast<std::uint16_t>(down + 1);
  const double d_down = std::fabs(double(f) - double(bfloat16_to_float(down)));
  const double up_value = (up & 0x7F80u) == 0x7F80u && (up & 0x7Fu) == 0
                              ? std::ldexp(1.0, 128) * (f < 0 ? -1 : 1)  // rounds past max
                              : double(bfloat16_to_float(up));
  const double d_up = std::fabs(double(f) - up_value);
  if (d_down < d_up) return down;
  if (d_up < d_down) return up;
  return (down & 1u) == 0 ? down : up;
}

bool same_bits(float a, float b) { return float_to_bits(a) == float_to_bits(b); }

// Floats that exercise every rounding decision: each exponent and high
// mantissa pattern, combined with the low bits around the rounding point of
// both formats (bit 13 for binary16, bit 16 for bfloat16).
std::vector<float> rounding_probe_floats() {
  static const std::uint32_t kLowPatterns[] = {
      0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF,  0x2000,  0x2001,  0x2FFF, 0x3000,
      0x3001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x10000, 0x17FFF, 0x18000, 0x18001};
  std::vector<float> values;
  for (std::uint32_t high = 0; high < (1u << 15); ++high)
    for (std::uint32_t low : kLowPatterns) values.push_back(bits_to_float((high << 17) | low));
  return values;
}

std::vector<std::uint16_t> all_16bit_patterns() {
  std::vector<std::uint16_t> v(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<std::uint16_t>(i);
  return v;
}

TEST(Float16, EdgeValues) {
  EXPECT_EQ(float_to_float16(0.0f), 0x0000);
  EXPECT_EQ(float_to_float16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_float16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_float16(65504.0f), 0x7BFF);   // largest finite
  EXPECT_EQ(float_to_float16(65519.99f), 0x7BFF);  // just under half-way
  EXPECT_EQ(float_to_float16(65520.0f), 0x7C00);   // half-way: to even = inf
  EXPECT_EQ(float_to_float16(INFINITY), 0x7C00);
  EXPECT_EQ(float_to_float16(-INFINITY), 0xFC00);
  EXPECT_EQ(float_to_float16(0x1p-24f), 0x0001);             // smallest subnormal
  EXPECT_EQ(float_to_float16(0x1p-25f), 0x0000);             // half-way to it: to even = 0
  EXPECT_EQ(float_to_float16(0x1.000002p-25f), 0x0001);      // just above half-way
  EXPECT_EQ(float_to_float16(0x1p-14f), 0x0400);             // smallest normal
  EXPECT_EQ(float_to_float16(1.0f + 0x1p-11f), 0x3C00);      // tie, even stays
  EXPECT_EQ(float_to_float16(1.0f + 3 * 0x1p-11f), 0x3C02);  // tie, odd rounds up
  EXPECT_EQ(float16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(float16_to_float(0x0001), 0x1p-24f);
  EXPECT_TRUE(std::isinf(float16_to_float(0x7C00)));
  EXPECT_TRUE(std::signbit(float16_to_float(0x8000)));
  const float nan = float16_to_float(0xFE01);
  EXPECT_TRUE(std::isnan(nan));
  EXPECT_TRUE(std::signbit(nan));
  EXPECT_EQ(float_to_float16(nan) & 0x7C00, 0x7C00);
  EXPECT_NE(float_to_float16(nan) & 0x03FF, 0);
}

TEST(BFloat16, EdgeValues) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bfloat16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bfloat16(bits_to_float(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(float_to_bfloat16(bits_to_float(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(float_to_bfloat16(bits_to_float(0x3F808001)), 0x3F81);
  EXPECT_EQ(float_to_bfloat16(bits_to_float(0x7F7FFFFF)), 0x7F80);  // rounds to inf
  EXPECT_EQ(float_to_bfloat16(INFINITY), 0x7F80);
  EXPECT_EQ(float_to_bfloat16(bits_to_float(0x00000001)), 0x0000);  // tiny subnormal
  EXPECT_EQ(float_to_bfloat16(bits_to_float(0x00018000)), 0x0002);  // subnormal tie
  // A NaN whose payload sits only in the low bits must not become infinity.
  EXPECT_EQ(float_to_bfloat16(bits_to_float(0x7F800001)), 0x7FC0);
  EXPECT_EQ(float_to_bfloat16(bits_to_float(0xFFFFFFFF)), 0xFFFF);
}

class ConversionTest : public ::testing::TestWithParam<Isa> {
 protected:
  const KernelTable& table() { return kernels(GetParam()); }
};

TEST_P(ConversionTest, EveryFloat16ToFloat32) {
  const auto input = all_16bit_patterns();
  std::vector<float> out(input.size());
  table().float16_to_float32(input.data(), out.data(), input.size());
  for (std::size_t i = 0; i < input.size(); ++i) {
    // Scalar and vector paths agree to the bit, NaN payloads included.
    ASSERT_TRUE(same_bits(out[i], float16_to_float(input[i]))) << std::hex << input[i];
    const float ref = reference_float16_to_float(input[i]);
    if (std::isnan(ref))
      ASSERT_TRUE(std::isnan(out[i]) && std::signbit(out[i]) == std::signbit(ref));
    else
      ASSERT_TRUE(same_bits(out[i], ref)) << std::hex << input[i];
  }
}

TEST_P(ConversionTest, Float32ToFloat16AtEveryRoundingPoint) {
  const auto input = rounding_probe_floats();
  std::vector<std::uint16_t> out(input.size());
  table().float32_to_float16(input.data(), out.data(), input.size());
  for (std::size_t i = 0; i < input.size(); ++i) {
    ASSERT_EQ(out[i], float_to_float16(input[i])) << std::hexfloat << input[i];
    if (!std::isnan(input[i])) {
      ASSERT_EQ(out[i], reference_float_to_float16(input[i])) << std::hexfloat << input[i];
    }
  }
}

TEST_P(ConversionTest, EveryBFloat16ToFloat32) {
  const auto input = all_16bit_patterns();
  std::vector<float> out(input.size());
  table().bfloat16_to_float32(input.data(), out.data(), input.size());
  for (std::size_t i = 0; i < input.size(); ++i)
    ASSERT_EQ(float_to_bits(out[i]), std::uint32_t{input[i]} << 16) << std::hex << input[i];
}

TEST_P(ConversionTest, Float32ToBFloat16AtEveryRoundingPoint) {
  const auto input = rounding_probe_floats();
  std::vector<std::uint16_t> out(input.size());
  table().float32_to_bfloat16(input.data(), out.data(), input.size());
  for (std::size_t i = 0; i < input.size(); ++i) {
    if (std::isnan(input[i])) {
      ASSERT_TRUE(std::isnan(bfloat16_to_float(out[i])));
      ASSERT_EQ(out[i] >> 15, float_to_bits(input[i]) >> 31);
    } else {
      ASSERT_EQ(out[i], reference_float_to_bfloat16(input[i])) << std::hexfloat << input[i];
    }
  }
}

TEST_P(ConversionTest, RoundTripOfEvery16BitValueIsExact) {
  const auto input = all_16bit_patterns();
  std::vector<float> wide(input.size());
  std::vector<std::uint16_t> back(input.size());
  table().float16_to_float32(input.data(), wide.data(), input.size());
  table().float32_to_float16(wide.data(), back.data(), input.size());
  for (std::size_t i = 0; i < input.size(); ++i) {
    const bool nan = (input[i] & 0x7C00) == 0x7C00 && (input[i] & 0x3FF) != 0;
    // NaNs come back quiet (bit 9 set); everything else comes back unchanged.
    ASSERT_EQ(back[i], nan ? (input[i] | 0x200) : input[i]) << std::hex << input[i];
  }
  table().bfloat16_to_float32(input.data(), wide.data(), input.size());
  table().float32_to_bfloat16(wide.data(), back.data(), input.size());
  for (std::size_t i = 0; i < input.size(); ++i) {
    const bool nan = (input[i] & 0x7F80) == 0x7F80 && (input[i] & 0x7F) != 0;
    ASSERT_EQ(back[i], nan ? (input[i] | 0x40) : input[i]) << std::hex << input[i];
  }
}

std::string isa_name(const ::testing::TestParamInfo<Isa>& info) {
  return std::string(to_string(info.param));
}

INSTANTIATE_TEST_SUITE_P(RunnableIsas, ConversionTest, ::testing::ValuesIn(runnable_isas()),
                         isa_name);

}  // namespace
}  // namespace chorus::reduce
