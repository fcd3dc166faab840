#include "reduce/reduce.hpp"
#include "common/config.hpp"

#include <chorus/error.hpp>

#include "common/logging.hpp"

#include <cstdlib>
#include <string>

namespace chorus::reduce {
namespace {

const KernelTable* resolve_active_table() {
  const Isa isa = active_isa();
  log::info("reduction kernels: {}", to_string(isa));
  return &kernels(isa);
}

const KernelTable& active_table() {
  static const KernelTable* table = resolve_active_table();
  return *table;
}

}  // namespace

std::string_view to_string(Isa isa) noexcept {
  switch (isa) {
    case Isa::generic:
      return "generic";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
  }
  return "invalid";
}

bool cpu_supports(Isa isa) noexcept {
#if defined(CHORUS_HAVE_X86_KERNELS)
  // Must match the -m flags of kernels_avx2.cpp and kernels_avx512.cpp
  // (src/CMakeLists.txt); GCC's checks include OS support for the registers.
  __builtin_cpu_init();
  switch (isa) {
    case Isa::generic:
      return true;
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("f16c");
  }
  return false;
#else
  return isa == Isa::generic;
#endif
}

std::vector<Isa> runnable_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512})
    if (cpu_supports(isa)) isas.push_back(isa);
  return isas;
}

Isa active_isa() {
  const char* forced = config::raw(config::Variable::simd);
  if (forced == nullptr || *forced == '\0' || std::string_view(forced) == "auto")
    return runnable_isas().back();
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512}) {
    if (to_string(isa) != forced) continue;
    if (!cpu_supports(isa)) {
      std::string runnable = "auto";
      for (Isa r : runnable_isas()) runnable += ", " + std::string(to_string(r));
      throw Error(ErrorCode::unsupported, "CHORUS_SIMD=" + std::string(forced) +
                                              ": this CPU cannot run those kernels; use one of " +
                                              runnable);
    }
    return isa;
  }
  throw Error(ErrorCode::invalid_argument, "CHORUS_SIMD='" + std::string(forced) +
                                               "' is not one of auto, generic, avx2, avx512");
}

const KernelTable& kernels(Isa isa) {
  if (!cpu_supports(isa))
    throw Error(ErrorCode::unsupported,
                "reduction kernels for " + std::string(to_string(isa)) + " cannot run on this CPU");
#if defined(CHORUS_HAVE_X86_KERNELS)
  if (isa == Isa::avx512) return avx512_kernels();
  if (isa == Isa::avx2) return avx2_kernels();
#endif
  return generic_kernels();
}

void check_supported(DataType type, ReduceOp op) {
  if (!is_valid(type))
    throw Error(ErrorCode::invalid_argument, "datatype: " + std::to_string(static_cast<int>(type)) +
                                                 " is not a chorus::DataType");
  if (!is_valid(op))
    throw Error(ErrorCode::invalid_argument,
                "op: " + std::to_string(static_cast<int>(op)) + " is not a chorus::ReduceOp");
  if (is_supported(type, op)) return;
  const std::string pair = std::string(to_string(op)) + " on " + std::string(to_string(type));
  if (op == ReduceOp::avg)
    throw Error(ErrorCode::invalid_argument,
                "op: " + pair +
                    " is not defined: avg is for floating-point types only "
                    "(an integer average would need a rounding rule); use sum and divide");
  throw Error(ErrorCode::invalid_argument,
              "op: " + pair + " is not defined: band, bor and bxor are for integer types only");
}

void reduce(void* dst, const void* src, std::size_t count, DataType type, ReduceOp op) {
  reduce(dst, dst, src, count, type, op);
}

void reduce(void* dst, const void* a, const void* b, std::size_t count, DataType type,
            ReduceOp op) {
  check_supported(type, op);
  if (count == 0) return;
  active_table().reduce[static_cast<int>(type)][static_cast<int>(op)](dst, a, b, count);
}

void divide(void* buf, std::size_t count, DataType type, std::size_t divisor) {
  if (!is_floating_point(type))
    throw Error(ErrorCode::invalid_argument, "datatype: divide needs a floating-point type, not " +
                                                 std::string(to_string(type)));
  if (divisor == 0) throw Error(ErrorCode::invalid_argument, "divisor: must not be 0");
  if (count == 0) return;
  active_table().divide[static_cast<int>(type)](buf, count, divisor);
}

}  // namespace chorus::reduce
