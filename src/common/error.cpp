#include <chorus/error.hpp>

namespace chorus {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument:
      return "invalid argument";
    case ErrorCode::unsupported:
      return "unsupported";
    case ErrorCode::timeout:
      return "timeout";
    case ErrorCode::peer_failure:
      return "peer failure";
    case ErrorCode::mismatched_collective:
      return "mismatched collective";
    case ErrorCode::transport_error:
      return "transport error";
    case ErrorCode::internal:
      return "internal error";
    case ErrorCode::aborted:
      return "aborted";
  }
  return "unknown error";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(message), code_(code) {}

}  // namespace chorus
