#include "common/secret.hpp"

#include "common/config.hpp"
#include "common/logging.hpp"

#include <chorus/error.hpp>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace chorus::auth {
namespace {

constexpr std::size_t kMaxSecretFile = 1 << 16;

Digest sha256(std::string_view text) {
  Digest out{};
  unsigned int length = 0;
  if (EVP_Digest(text.data(), text.size(), reinterpret_cast<unsigned char*>(out.data()), &length,
                 EVP_sha256(), nullptr) != 1 ||
      length != out.size())
    throw Error(ErrorCode::internal, "SHA-256 failed (OpenSSL)");
  return out;
}

std::string read_secret_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("CHORUS_SECRET_FILE={}: {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("CHORUS_SECRET_FILE={}: not a regular file", path));
  if (st.st_uid != ::geteuid())
    throw Error(ErrorCode::invalid_argument,
                fmt::format("CHORUS_SECRET_FILE={}: owned by uid {}, not by this user ({}); a "
                            "secret must be this user's own",
                            path, st.st_uid, ::geteuid()));
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("CHORUS_SECRET_FILE={}: mode {:o} lets group or others read it; "
                            "chmod 600 it",
                            path, st.st_mode & 0777));
  if (st.st_size > static_cast<off_t>(kMaxSecretFile))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("CHORUS_SECRET_FILE={}: {} bytes, over the {} a secret may have", path,
                            st.st_size, kMaxSecretFile));
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in && !in.eof())
    throw Error(ErrorCode::invalid_argument,
                fmt::format("CHORUS_SECRET_FILE={}: cannot read it", path));
  std::string secret = text.str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty())
    throw Error(ErrorCode::invalid_argument, fmt::format("CHORUS_SECRET_FILE={}: empty", path));
  return secret;
}

}  // namespace

Secret::Secret(std::string_view text) {
  if (text.empty()) throw Error(ErrorCode::invalid_argument, "a job secret must not be empty");
  key_ = sha256(text);
}

Secret Secret::from_key(const Digest& key) {
  Secret s;
  s.key_ = key;
  return s;
}

std::optional<Secret> Secret::from_env() {
  if (auto text = config::get(config::Variable::secret)) return Secret(*text);
  if (auto path = config::get(config::Variable::secret_file)) return Secret(read_secret_file(*path));
  return std::nullopt;
}

Digest Secret::mac(std::string_view label,
                   std::initializer_list<std::span<const std::byte>> parts) const {
  std::string input;
  auto append = [&](std::span<const std::byte> part) {
    const auto n = static_cast<std::uint64_t>(part.size());
    input.append(reinterpret_cast<const char*>(&n), sizeof n);
    input.append(reinterpret_cast<const char*>(part.data()), part.size());
  };
  append(bytes_of(label));
  for (auto part : parts) append(part);
  Digest out{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
           reinterpret_cast<const unsigned char*>(input.data()), input.size(),
           reinterpret_cast<unsigned char*>(out.data()), &length) == nullptr ||
      length != out.size())
    throw Error(ErrorCode::internal, "HMAC-SHA256 failed (OpenSSL)");
  return out;
}

Secret Secret::derive(std::string_view purpose,
                      std::initializer_list<std::span<const std::byte>> parts) const {
  return from_key(mac(purpose, parts));
}

std::uint64_t Secret::fingerprint() const {
  const Digest d = mac("chorus fingerprint", {});
  std::uint64_t f;
  std::memcpy(&f, d.data(), sizeof f);
  return f;
}

Nonce random_nonce() {
  Nonce n{};
  std::size_t got = 0;
  while (got < n.size()) {
    const ssize_t r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      throw Error(ErrorCode::internal, fmt::format("getrandom: {}", std::strerror(errno)));
    got += static_cast<std::size_t>(r);
  }
  return n;
}

std::string generate_secret_text() {
  const Nonce n = random_nonce();
  std::string hex;
  for (auto b : n) hex += fmt::format("{:02x}", static_cast<unsigned>(b));
  return hex;
}

bool same(const Digest& a, const Digest& b) noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void note_unauthenticated(std::string_view what) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    log::info("{} runs without a job secret: anyone who can reach its store and ports can join "
              "it (set CHORUS_SECRET or CHORUS_SECRET_FILE; docs/security.md)",
              what);
}

}  // namespace chorus::auth
