#include "transport/tcp/frames.hpp"

#include "common/wire.hpp"

#include <fmt/format.h>

#include <netinet/in.h>

#include <cstring>

namespace chorus::transport::tcp {
namespace {

constexpr std::uint32_t kBlobMagic = 0x31544843;   // "CHT1"
constexpr std::uint32_t kHelloMagic = 0x48524843;  // "CHRH"
constexpr std::uint32_t kFrameMagic = 0x54524843;  // "CHRT"

}  // namespace

FrameHeader make_header(FrameType type, Tag tag, std::uint64_t length, std::uint64_t id) {
  return FrameHeader{kFrameMagic, kVersion, static_cast<std::uint8_t>(type), 0, tag, length, id};
}

FrameHeader decode_header(std::span<const std::byte> bytes) {
  wire::Reader in(bytes.first(std::min(bytes.size(), sizeof(FrameHeader))), "tcp frame");
  FrameHeader h{};
  h.magic = in.get<std::uint32_t>();
  h.version = in.get<std::uint8_t>();
  h.type = in.get<std::uint8_t>();
  h.reserved = in.get<std::uint16_t>();
  h.tag = in.get<std::uint64_t>();
  h.length = in.get<std::uint64_t>();
  h.id = in.get<std::uint64_t>();
  return h;
}

std::string check_header(const FrameHeader& h) {
  if (h.magic != kFrameMagic) return fmt::format("bad frame magic {:#010x}", h.magic);
  if (h.version != kVersion) return fmt::format("frame version {}", h.version);
  if (h.tag > kMaxTag) return fmt::format("tag {:#x} out of range", h.tag);
  return "";
}

Hello make_hello(std::uint64_t job, int from, int to, const auth::Nonce& nonce,
                 const auth::Digest& proof) {
  return Hello{kHelloMagic,
               kVersion,
               {},
               job,
               static_cast<std::uint32_t>(from),
               static_cast<std::uint32_t>(to),
               nonce,
               proof};
}

auth::Secret link_key(const AddressBlob& rank0, const std::optional<auth::Secret>& secret) {
  std::string material = "chorus tcp links";
  material.append(reinterpret_cast<const char*>(rank0.data()), rank0.size());
  if (secret) {
    const auth::Digest d = secret->mac("chorus tcp links", {});
    material.append(reinterpret_cast<const char*>(d.data()), d.size());
  }
  return auth::Secret(material);
}

auth::Digest link_proof(const auth::Secret& key, bool accepting, const Hello& connector,
                        const Hello& acceptor) {
  return key.mac(accepting ? "chorus tcp accept" : "chorus tcp connect",
                 {connector.nonce, acceptor.nonce, auth::bytes_of(connector.from),
                  auth::bytes_of(connector.to)});
}

Hello decode_hello(std::span<const std::byte> bytes) {
  wire::Reader in(bytes, "tcp handshake");
  Hello h{};
  h.magic = in.get<std::uint32_t>();
  h.version = in.get<std::uint8_t>();
  for (auto& r : h.reserved) r = in.get<std::uint8_t>();
  h.job = in.get<std::uint64_t>();
  h.from = in.get<std::uint32_t>();
  h.to = in.get<std::uint32_t>();
  for (auto& b : h.nonce) b = static_cast<std::byte>(in.get<std::uint8_t>());
  for (auto& b : h.proof) b = static_cast<std::byte>(in.get<std::uint8_t>());
  return h;
}

bool speaks_chorus(const Hello& h) { return h.magic == kHelloMagic && h.version == kVersion; }

std::string judge_hello(const Hello& h, std::uint64_t job, int expect_to, int size) {
  if (h.magic != kHelloMagic) return fmt::format("not a chorus peer (magic {:#010x})", h.magic);
  if (h.version != kVersion)
    return fmt::format("protocol version {} (this is {})", h.version, kVersion);
  if (h.job != job)
    return "belongs to another job (the two ranks hold different addresses for rank 0, or "
           "different secrets: a stale or shared store, or a stray process)";
  if (static_cast<int>(h.to) != expect_to)
    return fmt::format("addressed to rank {}, this is rank {}", h.to, expect_to);
  if (static_cast<int>(h.from) >= size)
    return fmt::format("claims rank {} of a group of {}", h.from, size);
  return "";
}


AddressBlob encode_address(const net::SocketAddress& address, std::uint64_t nonce) {
  wire::Writer out;
  const bool v6 = address.family() == AF_INET6;
  out.put(kBlobMagic).put(nonce).put(static_cast<std::uint8_t>(v6 ? 6 : 4)).put(address.port());
  const auto* at = v6 ? reinterpret_cast<const std::byte*>(
                            &reinterpret_cast<const sockaddr_in6*>(&address.storage)->sin6_addr)
                      : reinterpret_cast<const std::byte*>(
                            &reinterpret_cast<const sockaddr_in*>(&address.storage)->sin_addr);
  AddressBlob blob = std::move(out.bytes());
  blob.insert(blob.end(), at, at + (v6 ? 16 : 4));
  return blob;
}

net::SocketAddress decode_address(const AddressBlob& blob, int rank) {
  auto bad = [&](const char* why) {
    return Error(ErrorCode::invalid_argument,
                 fmt::format("TCP address of rank {} is unusable ({}); do all ranks use the tcp "
                             "transport and the same chorus version?",
                             rank, why));
  };
  if (blob.size() < 15) throw bad("too short");
  wire::Reader in(blob, "tcp address");
  if (in.get<std::uint32_t>() != kBlobMagic) throw bad("not a TCP address");
  (void)in.get<std::uint64_t>();  // the nonce: part of the job identity only
  const auto family = in.get<std::uint8_t>();
  const auto port = in.get<std::uint16_t>();
  net::SocketAddress a;
  if (family == 4 && blob.size() == 19) {
    auto* in4 = reinterpret_cast<sockaddr_in*>(&a.storage);
    in4->sin_family = AF_INET;
    std::memcpy(&in4->sin_addr, blob.data() + 15, 4);
    a.length = sizeof(sockaddr_in);
  } else if (family == 6 && blob.size() == 31) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    in6->sin6_family = AF_INET6;
    std::memcpy(&in6->sin6_addr, blob.data() + 15, 16);
    a.length = sizeof(sockaddr_in6);
  } else {
    throw bad("bad family or length");
  }
  a.set_port(port);
  return a;
}

}  // namespace chorus::transport::tcp
