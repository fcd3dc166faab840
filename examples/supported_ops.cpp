// Prints which reduction ops chorus defines on which element types.
// Uses only the public header.
#include <chorus/chorus.hpp>

#include <cstdio>
#include <string>

int main() {
  std::printf("chorus %s\n\n", chorus::version_string());
  std::printf("%-9s %s\n", "datatype", "ops (bytes per element)");
  for (int t = 0; t < chorus::kDataTypeCount; ++t) {
    const auto type = static_cast<chorus::DataType>(t);
    std::string ops;
    for (int o = 0; o < chorus::kReduceOpCount; ++o) {
      const auto op = static_cast<chorus::ReduceOp>(o);
      if (chorus::is_supported(type, op)) ops += std::string(chorus::to_string(op)) + " ";
    }
    std::printf("%-9s %s(%zu)\n", std::string(chorus::to_string(type)).c_str(), ops.c_str(),
                chorus::size_of(type));
  }
  return 0;
}
