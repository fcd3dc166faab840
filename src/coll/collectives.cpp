#include "coll/collectives.hpp"

#include "coll/selector.hpp"

#include <fmt/format.h>

namespace chorus::coll {

std::string_view method_name(Method m) noexcept {
  switch (m) {
    case Method::binomial_tree: return "binomial_tree";
    case Method::chain: return "chain";
    case Method::ring: return "ring";
    case Method::pairwise: return "pairwise";
    case Method::dissemination: return "dissemination";
  }
  return "unknown algorithm";
}

std::string_view algorithm_name(std::uint8_t index) noexcept {
  if (index < kVariantCount) return variant_name(index);
  return method_name(static_cast<Method>(index));
}

void require_steps(int p, std::string_view collective) {
  if (p > static_cast<int>(kMaxSteps))
    throw Error(ErrorCode::unsupported,
                fmt::format("{}: {} ranks exceed the {} steps of a call's tag space", collective, p,
                            kMaxSteps));
}

}  // namespace chorus::coll
