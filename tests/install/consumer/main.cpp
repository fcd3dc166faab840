// Uses the installed headers and library: versions agree, the public types
// work, and an Error thrown inside libchorus is caught here by type.
#include <chorus/chorus.hpp>

#include <cstdio>
#include <cstring>

int main() {
  if (std::strcmp(chorus::version_string(), CHORUS_VERSION_STRING) != 0) {
    std::printf("header version %s, library version %s\n", CHORUS_VERSION_STRING,
                chorus::version_string());
    return 1;
  }
  auto type = chorus::parse_datatype("bfloat16");
  if (!type || chorus::size_of(*type) != 2 || chorus::to_string(*type) != "bfloat16") return 2;
  if (chorus::is_supported(chorus::DataType::float32, chorus::ReduceOp::bxor)) return 3;
  try {
    throw chorus::Error(chorus::ErrorCode::timeout, "consumer check");
  } catch (const chorus::Error& e) {
    if (e.code() != chorus::ErrorCode::timeout || chorus::to_string(e.code()) != "timeout")
      return 4;
  }
  std::printf("chorus %s consumer OK\n", chorus::version_string());
  return 0;
}
