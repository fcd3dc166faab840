// The TCP transport's wire format: the address blob, the handshake and the
// frame header, each with its constants. Everything read from a peer is
// decoded with common/wire.hpp's bounds-checked Reader before any of it is
// used; a short or malformed header is an Error, never an overread.
#pragma once

#include "common/socket.hpp"
#include "transport/transport.hpp"

#include <cstddef>
#include <cstdint>
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

// ---- the handshake: each side of a new connection sends one Hello

struct Hello {
  std::uint32_t magic;
  std::uint8_t version;
  std::uint8_t reserved[3];
  std::uint64_t job;   // a hash of every rank's address blob (job_id)
  std::uint32_t from;  // the sender's rank
  std::uint32_t to;    // the rank it means to reach
};
static_assert(sizeof(Hello) == 24);

Hello make_hello(std::uint64_t job, int from, int to);
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
// The job's identity: a hash of every rank's blob, in rank order.
std::uint64_t job_id(std::span<const AddressBlob> blobs);

}  // namespace chorus::transport::tcp
