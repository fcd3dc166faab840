// Inputs whose AllReduce is exact in any order of reduction, for every dtype
// and op (avg included), and the expected result to compare bit for bit.
//
// Values are small integers: sums stay within what every type (int8,
// float16, bfloat16 included) represents exactly for up to 64 ranks;
// products are +-1 (or 1 and 2 for unsigned types, which wrap exactly);
// avg inputs sum to exactly `ranks` times the expected value. `seed` varies
// the values between checks.
#pragma once

#include <chorus/types.hpp>

#include <cstddef>
#include <cstdint>

namespace chorus::perf {

void fill_input(void* buffer, std::size_t count, DataType type, ReduceOp op, int rank, int ranks,
                std::uint64_t seed);
void fill_expected(void* buffer, std::size_t count, DataType type, ReduceOp op, int ranks,
                   std::uint64_t seed);
// Elements of `result` that differ (in any bit) from `expected`.
std::size_t count_wrong(const void* result, const void* expected, std::size_t count, DataType type);

}  // namespace chorus::perf
