#include <chorus/types.hpp>

#include <array>
#include <utility>

namespace chorus {
namespace {

bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// Canonical names first: to_string() takes the first entry of each value.
constexpr std::array<std::pair<std::string_view, DataType>, 27> kDataTypeNames{{
    {"int8", DataType::int8},
    {"uint8", DataType::uint8},
    {"int32", DataType::int32},
    {"uint32", DataType::uint32},
    {"int64", DataType::int64},
    {"uint64", DataType::uint64},
    {"float16", DataType::float16},
    {"bfloat16", DataType::bfloat16},
    {"float32", DataType::float32},
    {"float64", DataType::float64},
    // nccl-tests / NCCL / PyTorch spellings
    {"char", DataType::int8},
    {"int8_t", DataType::int8},
    {"uint8_t", DataType::uint8},
    {"int", DataType::int32},
    {"int32_t", DataType::int32},
    {"uint32_t", DataType::uint32},
    {"int64_t", DataType::int64},
    {"uint64_t", DataType::uint64},
    {"half", DataType::float16},
    {"fp16", DataType::float16},
    {"bf16", DataType::bfloat16},
    {"float", DataType::float32},
    {"fp32", DataType::float32},
    {"double", DataType::float64},
    {"fp64", DataType::float64},
    {"long", DataType::int64},
    {"unsigned", DataType::uint32},
}};

constexpr std::array<std::pair<std::string_view, ReduceOp>, 8> kReduceOpNames{{
    {"sum", ReduceOp::sum},
    {"prod", ReduceOp::prod},
    {"min", ReduceOp::min},
    {"max", ReduceOp::max},
    {"avg", ReduceOp::avg},
    {"band", ReduceOp::band},
    {"bor", ReduceOp::bor},
    {"bxor", ReduceOp::bxor},
}};

template <class Table, class Value>
std::string_view name_of(const Table& table, Value v) noexcept {
  for (const auto& [name, value] : table)
    if (value == v) return name;
  return "invalid";
}

template <class Table>
auto lookup(const Table& table, std::string_view name) noexcept
    -> std::optional<typename Table::value_type::second_type> {
  for (const auto& [candidate, value] : table)
    if (iequals(candidate, name)) return value;
  return std::nullopt;
}

}  // namespace

std::string_view to_string(DataType t) noexcept { return name_of(kDataTypeNames, t); }
std::string_view to_string(ReduceOp op) noexcept { return name_of(kReduceOpNames, op); }

std::optional<DataType> parse_datatype(std::string_view name) noexcept {
  return lookup(kDataTypeNames, name);
}
std::optional<ReduceOp> parse_reduce_op(std::string_view name) noexcept {
  return lookup(kReduceOpNames, name);
}

}  // namespace chorus
