// The one exception type chorus throws.
//
// Every failure surfaces as chorus::Error carrying an ErrorCode (what kind of
// failure, stable across versions and mirrored by the C ABI's result codes)
// and a message that names the offending argument or peer and, where there
// is one, what to do about it.
#pragma once

#include <chorus/export.hpp>

#include <stdexcept>
#include <string>
#include <string_view>

namespace chorus {

enum class ErrorCode {
  invalid_argument = 1,   // a caller's argument is wrong; nothing was sent
  unsupported,            // valid request this build or machine cannot do
  timeout,                // a deadline passed (CHORUS_TIMEOUT)
  peer_failure,           // a peer died, disconnected or sent garbage
  mismatched_collective,  // ranks called different collectives or arguments
  transport_error,        // the network or a transport library failed
  internal,               // a bug in chorus: please report it
  aborted,                // the communicator was aborted (abort() on this rank)
};

// "invalid argument", "peer failure", ...
CHORUS_API std::string_view to_string(ErrorCode code) noexcept;

class CHORUS_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);

  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace chorus
