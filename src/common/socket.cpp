#include "common/socket.hpp"

#include <chorus/error.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

namespace chorus::net {

void Fd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::uint16_t SocketAddress::port() const noexcept {
  if (family() == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
}

void SocketAddress::set_port(std::uint16_t port) noexcept {
  if (family() == AF_INET6)
    reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
  else
    reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
}

std::string SocketAddress::to_string() const {
  char text[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, text,
              sizeof text);
    return fmt::format("[{}]:{}", text, port());
  }
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, text, sizeof text);
  return fmt::format("{}:{}", text, port());
}

namespace {

std::string without_brackets(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    return host.substr(1, host.size() - 2);
  return host;
}

// getaddrinfo's first stream address for `host`; its return code.
int look_up(const std::string& host, int flags, SocketAddress& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) return rc != 0 ? rc : EAI_NONAME;
  std::memcpy(&address.storage, found->ai_addr, found->ai_addrlen);
  address.length = static_cast<socklen_t>(found->ai_addrlen);
  freeaddrinfo(found);
  return 0;
}

Error unresolved(const char* what, const std::string& host, int rc) {
  return Error(ErrorCode::invalid_argument,
               fmt::format("{}: cannot resolve host '{}': {}", what, host, gai_strerror(rc)));
}

}  // namespace

SocketAddress resolve(const std::string& host_in, std::uint16_t port, const char* what) {
  SocketAddress address;
  if (const int rc = look_up(without_brackets(host_in), 0, address); rc != 0)
    throw unresolved(what, host_in, rc);
  address.set_port(port);
  return address;
}

SocketAddress resolve(const std::string& host_in, std::uint16_t port, const char* what,
                      std::chrono::steady_clock::time_point deadline) {
  const std::string host = without_brackets(host_in);
  SocketAddress address;
  if (look_up(host, AI_NUMERICHOST, address) != 0) {
    // Shared with the lookup's thread, which may outlive this call.
    struct Lookup {
      std::mutex mutex;
      std::condition_variable done_cv;
      bool done = false;
      int rc = 0;
      SocketAddress address;
    };
    auto lookup = std::make_shared<Lookup>();
    std::thread([lookup, host] {
      SocketAddress found;
      const int rc = look_up(host, 0, found);
      std::lock_guard lock(lookup->mutex);
      lookup->rc = rc;
      lookup->address = found;
      lookup->done = true;
      lookup->done_cv.notify_all();
    }).detach();
    std::unique_lock lock(lookup->mutex);
    if (!lookup->done_cv.wait_until(lock, deadline, [&] { return lookup->done; }))
      throw Error(ErrorCode::timeout,
                  fmt::format("{}: resolving host '{}' did not finish within the timeout (does "
                              "its name server answer?)",
                              what, host_in));
    if (lookup->rc != 0) throw unresolved(what, host_in, lookup->rc);
    address = lookup->address;
  }
  address.set_port(port);
  return address;
}

std::pair<std::string, std::uint16_t> split_host_port(const std::string& text, const char* what) {
  const auto colon = text.rfind(':');
  const bool bracketed = !text.empty() && text.front() == '[';
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size() ||
      (bracketed && text[colon - 1] != ']') ||
      (!bracketed && text.find(':') != colon))  // a bare IPv6 address needs brackets
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: '{}' is not host:port (write IPv6 as [addr]:port)", what, text));
  const std::string port_text = text.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (*end != '\0' || port < 0 || port > 65535)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: port '{}' in '{}' is not 0..65535", what, port_text, text));
  return {text.substr(0, colon), static_cast<std::uint16_t>(port)};
}

void set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw Error(ErrorCode::transport_error, "fcntl(O_NONBLOCK): " + errno_text(errno));
}

void set_no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string errno_text(int err) { return std::strerror(err); }

Fd try_listen_on(SocketAddress& address, int backlog, int& error) {
  error = 0;
  Fd fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  if (!fd || setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd.get(), address.get(), address.length) != 0 || ::listen(fd.get(), backlog) != 0) {
    error = errno;
    return Fd();
  }
  address.length = sizeof address.storage;
  getsockname(fd.get(), address.get(), &address.length);
  return fd;
}

Fd listen_on(SocketAddress& address, int backlog) {
  int error = 0;
  Fd fd = try_listen_on(address, backlog, error);
  if (!fd)
    throw Error(ErrorCode::transport_error,
                fmt::format("cannot listen on {}: {}", address.to_string(), errno_text(error)));
  return fd;
}

}  // namespace chorus::net
