// Small RAII and helpers for POSIX sockets, shared by the TCP transport and
// the TCP rendezvous store.
#pragma once

#include <sys/socket.h>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

namespace chorus::net {

// Owns a file descriptor; closes it once.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset(int fd = -1) noexcept;
  // Gives up ownership: the caller closes it.
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

// An IPv4 or IPv6 socket address.
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const noexcept { return storage.ss_family; }
  std::uint16_t port() const noexcept;
  void set_port(std::uint16_t port) noexcept;
  // "127.0.0.1:5000" or "[::1]:5000"
  std::string to_string() const;
  const sockaddr* get() const noexcept { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* get() noexcept { return reinterpret_cast<sockaddr*>(&storage); }
};

// Resolves "host" (name, IPv4 or IPv6 literal, brackets allowed) and port.
// Throws chorus::Error (invalid argument) naming `what` when it cannot.
SocketAddress resolve(const std::string& host, std::uint16_t port, const char* what);
// The same, bounded by `deadline`: a name (not a literal) is looked up on a
// thread of its own, since getaddrinfo has no timeout but the resolver's
// (resolv.conf's, up to minutes when a name server does not answer); past
// the deadline, chorus::Error (timeout) naming `what` and the host, and the
// lookup is left to end on its own.
SocketAddress resolve(const std::string& host, std::uint16_t port, const char* what,
                      std::chrono::steady_clock::time_point deadline);

// "host:port" / "[v6]:port" -> host, port. Throws chorus::Error naming `what`.
std::pair<std::string, std::uint16_t> split_host_port(const std::string& text, const char* what);

void set_nonblocking(int fd);
void set_no_delay(int fd);
// "Connection refused" etc., for messages.
std::string errno_text(int err);

// A listening TCP socket bound to `address` (port 0: any free port); the
// bound port is written back into `address`. Throws chorus::Error.
Fd listen_on(SocketAddress& address, int backlog = 128);
// The same, but an empty Fd with `error` set (an errno) when it fails.
Fd try_listen_on(SocketAddress& address, int backlog, int& error);

}  // namespace chorus::net
