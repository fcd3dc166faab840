// Every reduction kernel of every runnable ISA, for every dtype x op, against
// a scalar reference written independently of the kernels: bit-exact for all
// values (each element is one IEEE operation), with any NaN accepted for NaN.
#include "reduce/float16.hpp"
#include "reduce/reduce.hpp"
#include "reference_float16.hpp"

#include <chorus/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace chorus::reduce {
namespace {

// ---- reference ---------------------------------------------------------------

template <class T>
T ref_min(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
    if (a == 0 && b == 0) return (std::signbit(a) || std::signbit(b)) ? -T(0) : T(0);
  }
  return b < a ? b : a;
}
template <class T>
T ref_max(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
    if (a == 0 && b == 0) return (std::signbit(a) && std::signbit(b)) ? -T(0) : T(0);
  }
  return b > a ? b : a;
}

template <class T>
T ref_apply(ReduceOp op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // Wrapping arithmetic done in 64 bits, then truncated: modulo 2^bits.
    const auto ua = static_cast<std::uint64_t>(a), ub = static_cast<std::uint64_t>(b);
    switch (op) {
      case ReduceOp::sum:
        return static_cast<T>(ua + ub);
      case ReduceOp::prod:
        return static_cast<T>(ua * ub);
      case ReduceOp::band:
        return static_cast<T>(ua & ub);
      case ReduceOp::bor:
        return static_cast<T>(ua | ub);
      case ReduceOp::bxor:
        return static_cast<T>(ua ^ ub);
      default:
        break;
    }
  } else {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        return a + b;
      case ReduceOp::prod:
        return a * b;
      default:
        break;
    }
  }
  if (op == ReduceOp::min) return ref_min(a, b);
  if (op == ReduceOp::max) return ref_max(a, b);
  ADD_FAILURE() << "no reference for " << to_string(op);
  return T{};
}

std::uint16_t ref_float_to_float16(float f) { return reference::reference_float_to_float16(f); }
float ref_float16_to_float(std::uint16_t bits) {
  return reference::reference_float16_to_float(bits);
}
float ref_bfloat16_to_float(std::uint16_t bits) {
  const std::uint32_t wide = std::uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}
std::uint16_t ref_float_to_bfloat16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  // Round to nearest even on the low 16 bits, done in 64-bit integers.
  const std::uint64_t low = bits & 0xFFFFu, high = bits >> 16;
  const bool up = low > 0x8000u || (low == 0x8000u && (high & 1u));
  return static_cast<std::uint16_t>(high + (up ? 1 : 0));
}

template <class T>
void ref_typed(ReduceOp op, const unsigned char* a, const unsigned char* b, unsigned char* out) {
  T x, y;
  std::memcpy(&x, a, sizeof(T));
  std::memcpy(&y, b, sizeof(T));
  const T r = ref_apply<T>(op, x, y);
  std::memcpy(out, &r, sizeof(T));
}

void reference(DataType type, ReduceOp op, const unsigned char* a, const unsigned char* b,
               unsigned char* out) {
  switch (type) {
    case DataType::int8:
      return ref_typed<std::int8_t>(op, a, b, out);
    case DataType::uint8:
      return ref_typed<std::uint8_t>(op, a, b, out);
    case DataType::int32:
      return ref_typed<std::int32_t>(op, a, b, out);
    case DataType::uint32:
      return ref_typed<std::uint32_t>(op, a, b, out);
    case DataType::int64:
      return ref_typed<std::int64_t>(op, a, b, out);
    case DataType::uint64:
      return ref_typed<std::uint64_t>(op, a, b, out);
    case DataType::float32:
      return ref_typed<float>(op, a, b, out);
    case DataType::float64:
      return ref_typed<double>(op, a, b, out);
    case DataType::float16:
    case DataType::bfloat16: {
      const bool half = type == DataType::float16;
      std::uint16_t x, y;
      std::memcpy(&x, a, 2);
      std::memcpy(&y, b, 2);
      const float fx = half ? ref_float16_to_float(x) : ref_bfloat16_to_float(x);
      const float fy = half ? ref_float16_to_float(y) : ref_bfloat16_to_float(y);
      const float r = ref_apply<float>(op, fx, fy);
      const std::uint16_t bits = half ? ref_float_to_float16(r) : ref_float_to_bfloat16(r);
      std::memcpy(out, &bits, 2);
      return;
    }
  }
}

bool is_nan_element(DataType type, const unsigned char* p) {
  switch (type) {
    case DataType::float32: {
      float f;
      std::memcpy(&f, p, 4);
      return std::isnan(f);
    }
    case DataType::float64: {
      double d;
      std::memcpy(&d, p, 8);
      return std::isnan(d);
    }
    case DataType::float16: {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    }
    case DataType::bfloat16: {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0;
    }
    default:
      return false;
  }
}

// ---- data --------------------------------------------------------------------

// Random element bytes: any bit pattern for integers and 16-bit floats (which
// covers every special value), and for float32/float64 a mix of ordinary
// magnitudes (so sums and products are mostly finite) and special values.
std::vector<unsigned char> random_elements(DataType type, std::size_t count, std::mt19937_64& rng) {
  const std::size_t size = size_of(type);
  std::vector<unsigned char> bytes(count * size);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t bits = rng();
    unsigned char* p = bytes.data() + i * size;
    if (type == DataType::float32 || type == DataType::float64) {
      const bool single = type == DataType::float32;
      const int pick = static_cast<int>(bits % 64);
      double v;
      switch (pick) {
        case 0:
          v = 0.0;
          break;
        case 1:
          v = -0.0;
          break;
        case 2:
          v = INFINITY;
          break;
        case 3:
          v = -INFINITY;
          break;
        case 4:
          v = NAN;
          break;
        case 5:
          v = single ? 1e-40 : 1e-310;
          break;  // subnormal
        case 6:
          v = single ? 3e38 : 1.7e308;
          break;  // sums overflow
        default:
          v = std::ldexp(static_cast<double>(bits >> 11) / 9007199254740992.0,
                         static_cast<int>((bits >> 6) % 60) - 30) *
              ((bits & 32) ? -1.0 : 1.0);
      }
      if (single) {
        const float f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
      } else {
        std::memcpy(p, &v, 8);
      }
    } else {
      std::memcpy(p, &bits, size);
    }
  }
  return bytes;
}

// ---- the matrix --------------------------------------------------------------

struct KernelCase {
  Isa isa;
  DataType type;
  ReduceOp op;
};

std::vector<KernelCase> all_kernel_cases() {
  std::vector<KernelCase> cases;
  for (Isa isa : runnable_isas())
    for (int t = 0; t < kDataTypeCount; ++t)
      for (int o = 0; o < kReduceOpCount; ++o) {
        const auto type = static_cast<DataType>(t);
        const auto op = static_cast<ReduceOp>(o);
        if (is_supported(type, op)) cases.push_back({isa, type, op});
      }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<KernelCase>& info) {
  return std::string(to_string(info.param.isa)) + "_" + std::string(to_string(info.param.type)) +
         "_" + std::string(to_string(info.param.op));
}

enum class Layout { out_of_place, dst_is_a, dst_is_b, misaligned };

const char* to_string(Layout l) {
  switch (l) {
    case Layout::out_of_place:
      return "out-of-place";
    case Layout::dst_is_a:
      return "in-place (dst == a)";
    case Layout::dst_is_b:
      return "in-place (dst == b)";
    case Layout::misaligned:
      return "misaligned by 1 byte";
  }
  return "?";
}

class ReduceKernelTest : public ::testing::TestWithParam<KernelCase> {
 protected:
  void check(std::size_t count, Layout layout) {
    const auto [isa, type, op] = GetParam();
    SCOPED_TRACE(testing::Message() << "count " << count << ", " << to_string(layout));
    const std::size_t size = size_of(type);
    const std::size_t bytes = count * size;
    std::mt19937_64 rng(count * 131 + static_cast<int>(type) * 17 + static_cast<int>(op));
    const auto a = random_elements(type, count, rng);
    const auto b = random_elements(type, count, rng);

    std::vector<unsigned char> expected(bytes);
    for (std::size_t i = 0; i < count; ++i)
      reference(type, op, &a[i * size], &b[i * size], &expected[i * size]);

    // Every buffer has guard bytes on both sides that must survive untouched.
    constexpr std::size_t kGuard = 64;
    constexpr unsigned char kGuardByte = 0xA5;
    const std::size_t shift = layout == Layout::misaligned ? 1 : 0;
    auto make = [&](const std::vector<unsigned char>& content) {
      std::vector<unsigned char> buf(kGuard + shift + bytes + kGuard, kGuardByte);
      std::copy(content.begin(), content.end(), buf.begin() + kGuard + shift);
      return buf;
    };
    auto buf_a = make(a), buf_b = make(b), buf_out = make(std::vector<unsigned char>(bytes, 0));
    unsigned char* pa = buf_a.data() + kGuard + shift;
    unsigned char* pb = buf_b.data() + kGuard + shift;
    unsigned char* dst = buf_out.data() + kGuard + shift;
    if (layout == Layout::dst_is_a) dst = pa;
    if (layout == Layout::dst_is_b) dst = pb;
    std::vector<unsigned char>& dst_buf = layout == Layout::dst_is_a   ? buf_a
                                          : layout == Layout::dst_is_b ? buf_b
                                                                       : buf_out;

    kernels(isa).reduce[static_cast<int>(type)][static_cast<int>(op)](dst, pa, pb, count);

    for (std::size_t g = 0; g < kGuard + shift; ++g) ASSERT_EQ(dst_buf[g], kGuardByte) << g;
    for (std::size_t g = kGuard + shift + bytes; g < dst_buf.size(); ++g)
      ASSERT_EQ(dst_buf[g], kGuardByte) << "overrun at byte " << g - kGuard - shift;
    for (std::size_t i = 0; i < count; ++i) {
      const unsigned char* got = dst + i * size;
      const unsigned char* want = &expected[i * size];
      if (is_nan_element(type, want) && is_nan_element(type, got)) continue;
      if (std::memcmp(got, want, size) != 0) {
        std::uint64_t g = 0, w = 0, x = 0, y = 0;
        std::memcpy(&g, got, size);
        std::memcpy(&w, want, size);
        std::memcpy(&x, &a[i * size], size);
        std::memcpy(&y, &b[i * size], size);
        FAIL() << "element " << i << ": " << std::hex << "0x" << x << " " << reduce::to_string(isa)
               << " " << chorus::to_string(op) << " 0x" << y << " gave 0x" << g << ", expected 0x"
               << w;
      }
    }
  }
};

TEST_P(ReduceKernelTest, MatchesReferenceForEveryCountAndLayout) {
  for (std::size_t count : {0, 1, 7, 8, 9, 15, 16, 17, 511, 512, 513, 1023})
    for (Layout layout :
         {Layout::out_of_place, Layout::dst_is_a, Layout::dst_is_b, Layout::misaligned}) {
      check(count, layout);
      if (HasFatalFailure()) return;
    }
}

TEST_P(ReduceKernelTest, MatchesReferenceOnLargeBuffers) {
  const std::size_t count = (std::size_t{1} << 20) + 3;  // 1 Mi elements and a tail
  check(count, Layout::dst_is_a);
  if (HasFatalFailure()) return;
  check(count, Layout::misaligned);
}

INSTANTIATE_TEST_SUITE_P(AllKernels, ReduceKernelTest, ::testing::ValuesIn(all_kernel_cases()),
                         case_name);

// ---- divide (finishing avg) --------------------------------------------------

class DivideTest : public ::testing::TestWithParam<Isa> {};

TEST_P(DivideTest, DividesEachElementOnceAndRoundsOnce) {
  const KernelTable& table = kernels(GetParam());
  const std::size_t count = 1029;
  for (std::size_t divisor : {1, 3, 7, 64}) {
    std::vector<float> f(count);
    std::vector<double> d(count);
    std::vector<std::uint16_t> h(count), bf(count);
    for (std::size_t i = 0; i < count; ++i) {
      f[i] = static_cast<float>(i) * 1.25f - 300.0f;
      d[i] = static_cast<double>(i) * 1.25 - 300.0;
      h[i] = ref_float_to_float16(f[i]);
      bf[i] = ref_float_to_bfloat16(f[i]);
    }
    auto f0 = f;
    auto d0 = d;
    auto h0 = h;
    auto bf0 = bf;
    table.divide[static_cast<int>(DataType::float32)](f.data(), count, divisor);
    table.divide[static_cast<int>(DataType::float64)](d.data(), count, divisor);
    table.divide[static_cast<int>(DataType::float16)](h.data(), count, divisor);
    table.divide[static_cast<int>(DataType::bfloat16)](bf.data(), count, divisor);
    const float fd = static_cast<float>(divisor);
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(f[i], f0[i] / fd) << i;
      ASSERT_EQ(d[i], d0[i] / static_cast<double>(divisor)) << i;
      ASSERT_EQ(h[i], ref_float_to_float16(ref_float16_to_float(h0[i]) / fd)) << i;
      ASSERT_EQ(bf[i], ref_float_to_bfloat16(ref_bfloat16_to_float(bf0[i]) / fd)) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RunnableIsas, DivideTest, ::testing::ValuesIn(runnable_isas()),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// ---- the dispatching entry points ---------------------------------------------

TEST(ReduceDispatch, TwoOperandFormReducesIntoDestination) {
  std::vector<float> dst = {1, 2, 3, -0.0f, NAN}, src = {10, -20, 30, 0.0f, 1};
  reduce(dst.data(), src.data(), dst.size(), DataType::float32, ReduceOp::sum);
  EXPECT_EQ(dst[0], 11);
  EXPECT_EQ(dst[1], -18);
  EXPECT_EQ(dst[2], 33);
  EXPECT_EQ(dst[3], 0.0f);
  EXPECT_TRUE(std::isnan(dst[4]));

  std::vector<std::int32_t> x = {INT32_MAX, -5}, y = {1, 3};
  reduce(x.data(), y.data(), x.size(), DataType::int32, ReduceOp::sum);
  EXPECT_EQ(x[0], INT32_MIN);  // wraps, never saturates
  EXPECT_EQ(x[1], -2);
}

TEST(ReduceDispatch, ThreeOperandFormLeavesInputsAlone) {
  const std::vector<std::uint8_t> a = {200, 7}, b = {100, 9};
  std::vector<std::uint8_t> out(2);
  reduce(out.data(), a.data(), b.data(), 2, DataType::uint8, ReduceOp::sum);
  EXPECT_EQ(out, (std::vector<std::uint8_t>{44, 16}));
  EXPECT_EQ(a, (std::vector<std::uint8_t>{200, 7}));
}

TEST(ReduceDispatch, FloatMinMaxAreOrderIndependentForZerosAndNaN) {
  float pz = 0.0f, nz = -0.0f;
  float m1 = pz, m2 = nz;
  reduce(&m1, &nz, 1, DataType::float32, ReduceOp::min);
  reduce(&m2, &pz, 1, DataType::float32, ReduceOp::min);
  EXPECT_TRUE(std::signbit(m1) && std::signbit(m2));
  float x1 = pz, x2 = nz;
  reduce(&x1, &nz, 1, DataType::float32, ReduceOp::max);
  reduce(&x2, &pz, 1, DataType::float32, ReduceOp::max);
  EXPECT_TRUE(!std::signbit(x1) && !std::signbit(x2));
  double n1 = NAN, n2 = 1.0, one = 1.0, nan = NAN;
  reduce(&n1, &one, 1, DataType::float64, ReduceOp::max);
  reduce(&n2, &nan, 1, DataType::float64, ReduceOp::max);
  EXPECT_TRUE(std::isnan(n1) && std::isnan(n2));
}

void expect_error(ErrorCode code, const std::string& fragment, auto&& call) {
  try {
    call();
    FAIL() << "expected chorus::Error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(ReduceDispatch, RejectsUndefinedPairsBeforeTouchingMemory) {
  float f = 1.0f;
  expect_error(ErrorCode::invalid_argument, "bxor on float32",
               [&] { reduce(&f, &f, 1, DataType::float32, ReduceOp::bxor); });
  std::int32_t i = 3;
  expect_error(ErrorCode::invalid_argument, "avg on int32",
               [&] { reduce(&i, &i, 1, DataType::int32, ReduceOp::avg); });
  expect_error(ErrorCode::invalid_argument, "datatype: 42",
               [&] { reduce(&i, &i, 1, static_cast<DataType>(42), ReduceOp::sum); });
  expect_error(ErrorCode::invalid_argument, "op: 9",
               [&] { reduce(&i, &i, 1, DataType::int32, static_cast<ReduceOp>(9)); });
  expect_error(ErrorCode::invalid_argument, "divisor",
               [&] { divide(&f, 1, DataType::float32, 0); });
  expect_error(ErrorCode::invalid_argument, "floating-point",
               [&] { divide(&i, 1, DataType::int32, 2); });
  EXPECT_EQ(f, 1.0f);
  EXPECT_EQ(i, 3);
  // Count 0 touches nothing, even through null pointers.
  reduce(nullptr, nullptr, 0, DataType::float32, ReduceOp::sum);
}

// CHORUS_SIMD is read by active_isa() on every call (the kernels in use are
// fixed at the first reduction, after which it no longer matters).
class SimdOverride : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("CHORUS_SIMD"); }
};

TEST_F(SimdOverride, ForcesARunnableIsa) {
  for (Isa isa : runnable_isas()) {
    setenv("CHORUS_SIMD", std::string(to_string(isa)).c_str(), 1);
    EXPECT_EQ(active_isa(), isa);
  }
  setenv("CHORUS_SIMD", "auto", 1);
  EXPECT_EQ(active_isa(), runnable_isas().back());
}

TEST_F(SimdOverride, RejectsUnknownNames) {
  setenv("CHORUS_SIMD", "sse9", 1);
  expect_error(ErrorCode::invalid_argument, "CHORUS_SIMD='sse9'", [] { active_isa(); });
}

TEST(Isa, GenericIsAlwaysRunnableAndListedFirst) {
  ASSERT_FALSE(runnable_isas().empty());
  EXPECT_EQ(runnable_isas().front(), Isa::generic);
  EXPECT_TRUE(cpu_supports(Isa::generic));
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512})
    if (!cpu_supports(isa))
      expect_error(ErrorCode::unsupported, "cannot run", [&] { kernels(isa); });
}

}  // namespace
}  // namespace chorus::reduce
