// The job secret: what lets the ranks of one job recognise each other, and
// refuse everyone else, at the store and in the transport handshakes.
//
// Where it comes from (first match): CHORUS_SECRET (any text), else
// CHORUS_SECRET_FILE (a regular file owned by this user and readable by no
// one else; its contents are the secret). Chorus's own launchers generate
// one for their children (allreduce_perf --np, the test harness), from_mpi
// broadcasts one over MPI, and the torch backend's links are keyed by what
// torch's store carried. Without a secret, Chorus works as before but binds
// the stores it serves to loopback unless told otherwise, and says once
// that the job is unauthenticated.
//
// The secret never travels: peers prove they hold it with HMAC-SHA256 over
// fresh random nonces from both sides (challenge-response), so a recorded
// exchange is worth nothing later. Data is not encrypted.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace chorus::auth {

using Digest = std::array<std::byte, 32>;
using Nonce = std::array<std::byte, 32>;

class Secret {
 public:
  // The key is SHA-256 of `text`, so any length works; empty is refused.
  explicit Secret(std::string_view text);
  static Secret from_key(const Digest& key);

  // CHORUS_SECRET, else CHORUS_SECRET_FILE, else nullopt. A file that is
  // missing, empty, not a regular file, not ours, or readable by group or
  // others is an Error naming the problem.
  static std::optional<Secret> from_env();

  // HMAC-SHA256 of `label` and then every part, each preceded by its length
  // (so that no two different part lists give the same input).
  Digest mac(std::string_view label,
             std::initializer_list<std::span<const std::byte>> parts) const;
  // A secret derived from this one for `purpose` (a job's links, say).
  Secret derive(std::string_view purpose,
                std::initializer_list<std::span<const std::byte>> parts) const;
  // 64 bits that tell two secrets apart without revealing anything that
  // would let one prove it holds them (an HMAC of a fixed label): for "you
  // belong to another job" answers.
  std::uint64_t fingerprint() const;

 private:
  Secret() = default;
  Digest key_{};
};

// Fresh random bytes from the kernel (getrandom); throws on failure.
Nonce random_nonce();
// 64 random hex digits: a secret for a launcher to hand its children.
std::string generate_secret_text();
// Constant-time comparison.
bool same(const Digest& a, const Digest& b) noexcept;

// Logs, once per process, that `what` runs without a job secret.
void note_unauthenticated(std::string_view what);

template <class T>
requires std::is_trivially_copyable_v<T> std::span<const std::byte> bytes_of(const T& value) {
  return std::as_bytes(std::span(&value, 1));
}
inline std::span<const std::byte> bytes_of(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

}  // namespace chorus::auth
