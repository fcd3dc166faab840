// The TCP transport's wire format: the address blob, the handshake and the
// frame header, each with its constants. Everything read from a peer is
// decoded with common/wire.hpp's bounds-checked Reader before any of it is
// used; a short or malformed header is an Error, never an overread.
#pragma once

#include "common/secret.hpp"
#include "common/socket.hpp"
#include "transport/transport.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace chorus::transport::tcp {

inline constexpr std::uint8_t kVersion = 1;
inline constexpr std::size_t kMaxAbortReason = 1024;

// ---- frames: a 32-byte header, then `length` bytes of payload

enum class FrameType : std::uint8_t { eager = 1, rts = 2, cts = 3, data = 4, reject = 5, abort = 6 };

// As it goes on the wire (little-endian hosts; written with one writev).
struct FrameHeader {
  std::uint32_t magic;
  std::uint8_t version;
  std::uint8_t type;
  std::uint16_t reserved;
  std::uint64_t tag;
  std::uint64_t length;
  std::uint64_t id;
};
static_assert(sizeof(FrameHeader) == 32);

FrameHeader make_header(FrameType type, Tag tag, std::uint64_t length, std::uint64_t id);
// Decodes the first sizeof(FrameHeader) bytes of `bytes` field by field.
FrameHeader decode_header(std::span<const std::byte> bytes);
// Why a header cannot be used (magic, version, tag range), or "".
std::string check_header(const FrameHeader& header);

// ---- the handshake: a challenge-response over the link key
//
// The connecting rank sends a Hello with its nonce; the accepting rank
// answers with a Hello carrying its own nonce and its proof (an HMAC with
// the link key over both nonces and both ranks); the connecting rank checks
// it and sends its own proof (kProofBytes). Only then does the accepting
// rank take the connection as that rank's. The key never travels, and
// `job` is the key's fingerprint, which proves nothing: it lets two ranks
// of different jobs tell each other so at once.

struct Hello {
  std::uint32_t magic;
  std::uint8_t version;
  std::uint8_t reserved[3];
  std::uint64_t job;   // the link key's fingerprint
  std::uint32_t from;  // the sender's rank
  std::uint32_t to;    // the rank it means to reach
  auth::Nonce nonce;   // the sender's challenge
  auth::Digest proof;  // the accepting rank's answer (zeros from the connecting one)
};
static_assert(sizeof(Hello) == 88);
inline constexpr std::size_t kProofBytes = sizeof(auth::Digest);

// The key of every link of a job: derived from rank 0's address blob (it
// carries a random nonce, so the key is as private as the channel that
// carried it: an authenticated store, MPI, ...) and from the job secret
// when there is one. Rank 0's alone, so that a rank that looks its peers'
// addresses up only when it first needs them (connect_looking_up) has it.
auth::Secret link_key(const AddressBlob& rank0, const std::optional<auth::Secret>& secret);
// The proof of the accepting side (`accepting` = true) or the connecting side.
auth::Digest link_proof(const auth::Secret& key, bool accepting, const Hello& connector,
                        const Hello& acceptor);

Hello make_hello(std::uint64_t job, int from, int to, const auth::Nonce& nonce,
                 const auth::Digest& proof = {});
// Decodes a Hello from exactly sizeof(Hello) bytes.
Hello decode_hello(std::span<const std::byte> bytes);
// Why a handshake is not acceptable to rank `expect_to` of `size` in job
// `job`, or "".
std::string judge_hello(const Hello& hello, std::uint64_t job, int expect_to, int size);
// Whether `hello` speaks this protocol (same magic and version), whatever its job.
bool speaks_chorus(const Hello& hello);

// ---- addresses

// "CHT1", a nonce, the family (4 or 6), the port, the address bytes.
AddressBlob encode_address(const net::SocketAddress& address, std::uint64_t nonce);
// Throws Error(invalid_argument) naming `rank` for a blob that is not one.
net::SocketAddress decode_address(const AddressBlob& blob, int rank);

}  // namespace chorus::transport::tcp
