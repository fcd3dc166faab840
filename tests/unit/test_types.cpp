#include <chorus/chorus.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

namespace chorus {
namespace {

constexpr DataType kAllTypes[] = {
    DataType::int8,   DataType::uint8,   DataType::int32,    DataType::uint32,  DataType::int64,
    DataType::uint64, DataType::float16, DataType::bfloat16, DataType::float32, DataType::float64};
constexpr ReduceOp kAllOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                                ReduceOp::avg, ReduceOp::band, ReduceOp::bor, ReduceOp::bxor};

TEST(DataType, SizesMatchTheirCppTypes) {
  EXPECT_EQ(size_of(DataType::int8), sizeof(std::int8_t));
  EXPECT_EQ(size_of(DataType::uint8), sizeof(std::uint8_t));
  EXPECT_EQ(size_of(DataType::int32), sizeof(std::int32_t));
  EXPECT_EQ(size_of(DataType::uint32), sizeof(std::uint32_t));
  EXPECT_EQ(size_of(DataType::int64), sizeof(std::int64_t));
  EXPECT_EQ(size_of(DataType::uint64), sizeof(std::uint64_t));
  EXPECT_EQ(size_of(DataType::float16), 2u);
  EXPECT_EQ(size_of(DataType::bfloat16), 2u);
  EXPECT_EQ(size_of(DataType::float32), sizeof(float));
  EXPECT_EQ(size_of(DataType::float64), sizeof(double));
  EXPECT_EQ(size_of(static_cast<DataType>(200)), 0u);
}

TEST(DataType, NamesRoundTripAndAreDistinct) {
  std::set<std::string_view> names;
  for (DataType t : kAllTypes) {
    names.insert(to_string(t));
    EXPECT_EQ(parse_datatype(to_string(t)), t) << to_string(t);
  }
  EXPECT_EQ(names.size(), std::size(kAllTypes));
  EXPECT_EQ(to_string(static_cast<DataType>(77)), "invalid");
}

TEST(DataType, ParsesNcclTestsAndFrameworkAliases) {
  EXPECT_EQ(parse_datatype("half"), DataType::float16);
  EXPECT_EQ(parse_datatype("float"), DataType::float32);
  EXPECT_EQ(parse_datatype("double"), DataType::float64);
  EXPECT_EQ(parse_datatype("bf16"), DataType::bfloat16);
  EXPECT_EQ(parse_datatype("int"), DataType::int32);
  EXPECT_EQ(parse_datatype("FLOAT32"), DataType::float32);
  EXPECT_EQ(parse_datatype("float128"), std::nullopt);
  EXPECT_EQ(parse_datatype(""), std::nullopt);
}

TEST(DataType, CppTypesMapToTheirDataType) {
  static_assert(datatype_of_v<float> == DataType::float32);
  static_assert(datatype_of_v<const double> == DataType::float64);
  static_assert(datatype_of_v<std::int8_t> == DataType::int8);
  static_assert(datatype_of_v<std::uint64_t> == DataType::uint64);
}

TEST(ReduceOp, NamesRoundTrip) {
  for (ReduceOp op : kAllOps) EXPECT_EQ(parse_reduce_op(to_string(op)), op);
  EXPECT_EQ(parse_reduce_op("MAX"), ReduceOp::max);
  EXPECT_EQ(parse_reduce_op("maxloc"), std::nullopt);
  EXPECT_EQ(to_string(static_cast<ReduceOp>(99)), "invalid");
}

TEST(ReduceOp, SupportFollowsTheDocumentedRules) {
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      const bool bitwise = op == ReduceOp::band || op == ReduceOp::bor || op == ReduceOp::bxor;
      bool expected = true;
      if (bitwise) expected = is_integer(t);
      if (op == ReduceOp::avg) expected = is_floating_point(t);
      EXPECT_EQ(is_supported(t, op), expected) << to_string(op) << " on " << to_string(t);
    }
  }
  EXPECT_FALSE(is_supported(static_cast<DataType>(10), ReduceOp::sum));
  EXPECT_FALSE(is_supported(DataType::float32, static_cast<ReduceOp>(8)));
}

TEST(Error, CarriesCodeAndMessage) {
  try {
    throw Error(ErrorCode::peer_failure, "rank 3 (host:port) closed the connection");
  } catch (const std::runtime_error& e) {  // catchable as a standard exception
    const auto* error = dynamic_cast<const Error*>(&e);
    ASSERT_NE(error, nullptr);
    EXPECT_EQ(error->code(), ErrorCode::peer_failure);
    EXPECT_STREQ(e.what(), "rank 3 (host:port) closed the connection");
  }
}

TEST(Error, EveryCodeHasADistinctName) {
  std::set<std::string_view> names;
  for (ErrorCode c : {ErrorCode::invalid_argument, ErrorCode::unsupported, ErrorCode::timeout,
                      ErrorCode::peer_failure, ErrorCode::mismatched_collective,
                      ErrorCode::transport_error, ErrorCode::internal})
    names.insert(to_string(c));
  EXPECT_EQ(names.size(), 7u);
  EXPECT_EQ(to_string(ErrorCode::mismatched_collective), "mismatched collective");
}

TEST(Version, LibraryMatchesHeaders) {
  EXPECT_STREQ(version_string(), CHORUS_VERSION_STRING);
  EXPECT_EQ(std::to_string(CHORUS_VERSION_MAJOR) + "." + std::to_string(CHORUS_VERSION_MINOR) +
                "." + std::to_string(CHORUS_VERSION_PATCH),
            CHORUS_VERSION_STRING);
}

}  // namespace
}  // namespace chorus
