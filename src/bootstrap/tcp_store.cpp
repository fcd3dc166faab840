#include "bootstrap/tcp_store.hpp"

#include "common/logging.hpp"
#include "common/wire.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <list>
#include <map>
#include <thread>

namespace chorus::bootstrap {
namespace {

constexpr std::uint32_t kMagic = 0x54534843;  // "CHST"
constexpr std::uint32_t kMaxMessage = 256u << 20;
constexpr std::size_t kMaxKey = 4096;

enum class Op : std::uint8_t { set = 1, get = 2, add = 3 };
enum class Status : std::uint8_t { ok = 0, timeout = 1, error = 2 };

using Clock = transport::Clock;

std::vector<std::byte> frame(const std::vector<std::byte>& body) {
  std::vector<std::byte> out(4 + body.size());
  const auto n = static_cast<std::uint32_t>(body.size());
  std::memcpy(out.data(), &n, 4);
  if (!body.empty()) std::memcpy(out.data() + 4, body.data(), body.size());
  return out;
}

int remaining_ms(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30));
}

}  // namespace

// ---- server -----------------------------------------------------------------

struct StoreServer::State {
  struct Client {
    net::Fd fd;
    std::string peer;
    std::vector<std::byte> in;
    std::vector<std::byte> out;
  };
  struct Waiter {  // a GET whose keys are not all set yet
    Client* client;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };
  std::list<Client> clients;
  std::list<Waiter> waiters;
  std::map<std::string, Bytes> values;
};

StoreServer::StoreServer(const std::string& host, std::uint16_t port)
    : StoreServer(host, net::resolve(host, port, "store server"), net::Fd()) {}

std::unique_ptr<StoreServer> StoreServer::serve_if_free(const std::string& host,
                                                        std::uint16_t port) {
  net::SocketAddress address = net::resolve(host, port, "store server");
  int error = 0;
  net::Fd listener = net::try_listen_on(address, 128, error);
  if (!listener && error == EADDRINUSE) return nullptr;
  if (!listener)
    throw Error(ErrorCode::transport_error,
                fmt::format("store server: cannot listen on {}: {}", address.to_string(),
                            net::errno_text(error)));
  return std::unique_ptr<StoreServer>(new StoreServer(host, address, std::move(listener)));
}

StoreServer::StoreServer(const std::string& host, net::SocketAddress address, net::Fd listener)
    : address_(address),
      host_(host),
      listener_(std::move(listener)),
      state_(std::make_unique<State>()) {
  if (!listener_) listener_ = net::listen_on(address_);
  net::set_nonblocking(listener_.get());
  wake_ = net::Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) throw Error(ErrorCode::internal, "eventfd: " + net::errno_text(errno));
  thread_ = std::thread([this] { serve(); });
  log::info("store server listening on {}", url());
}

StoreServer::~StoreServer() {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

std::string StoreServer::url() const {
  const bool v6 =
      address_.family() == AF_INET6 && host_.find(':') != std::string::npos && host_.front() != '[';
  return fmt::format("tcp://{}:{}", v6 ? "[" + host_ + "]" : host_, address_.port());
}

void StoreServer::serve() {
  State& s = *state_;
  auto reply_get = [&](State::Client& c, const std::vector<std::string>& keys) {
    wire::Writer w;
    w.put(static_cast<std::uint8_t>(Status::ok)).put(static_cast<std::uint32_t>(keys.size()));
    for (const auto& k : keys) w.put_bytes(s.values[k]);
    auto f = frame(w.bytes());
    c.out.insert(c.out.end(), f.begin(), f.end());
  };
  auto missing_of = [&](const std::vector<std::string>& keys) {
    std::vector<std::string> missing;
    for (const auto& k : keys)
      if (!s.values.count(k)) missing.push_back(k);
    return missing;
  };
  // Handles one request; throws chorus::Error when the client sent garbage.
  auto handle = [&](State::Client& c, std::span<const std::byte> body) {
    wire::Reader r(body, "store request from " + c.peer);
    if (r.get<std::uint32_t>() != kMagic)
      throw Error(ErrorCode::peer_failure, "store request from " + c.peer + ": bad magic");
    const auto op = static_cast<Op>(r.get<std::uint8_t>());
    auto key_of = [&] {
      std::string k = r.get_string();
      if (k.empty() || k.size() > kMaxKey)
        throw Error(ErrorCode::peer_failure,
                    "store request: key of " + std::to_string(k.size()) + " bytes");
      return k;
    };
    wire::Writer w;
    switch (op) {
      case Op::set: {
        std::string key = key_of();
        s.values[key] = r.get_bytes();
        w.put(static_cast<std::uint8_t>(Status::ok));
        break;
      }
      case Op::add: {
        std::string key = key_of();
        const auto delta = r.get<std::int64_t>();
        Bytes& stored = s.values[key];
        std::int64_t value = 0;
        if (stored.size() == sizeof value) std::memcpy(&value, stored.data(), sizeof value);
        value += delta;
        stored.resize(sizeof value);
        std::memcpy(stored.data(), &value, sizeof value);
        w.put(static_cast<std::uint8_t>(Status::ok)).put(value);
        break;
      }
      case Op::get: {
        const auto timeout_ms = r.get<std::uint32_t>();
        const auto n = r.get<std::uint32_t>();
        if (n > 1u << 20) throw Error(ErrorCode::peer_failure, "store request: too many keys");
        std::vector<std::string> keys;
        for (std::uint32_t i = 0; i < n; ++i) keys.push_back(key_of());
        if (missing_of(keys).empty())
          reply_get(c, keys);
        else
          s.waiters.push_back(
              {&c, std::move(keys), Clock::now() + std::chrono::milliseconds(timeout_ms)});
        return;
      }
      default:
        throw Error(ErrorCode::peer_failure, fmt::format("store request from {}: unknown op {}",
                                                         c.peer, static_cast<int>(op)));
    }
    if (!r.at_end()) throw Error(ErrorCode::peer_failure, "store request: trailing bytes");
    auto f = frame(w.bytes());
    c.out.insert(c.out.end(), f.begin(), f.end());
  };
  auto drop = [&](std::list<State::Client>::iterator it) {
    s.waiters.remove_if([&](const State::Waiter& w) { return w.client == &*it; });
    return s.clients.erase(it);
  };

  // Once told to stop, the server drains: it accepts no one new but keeps
  // answering the clients it has until they leave, for at most kDrain. Rank 0
  // serving the store may finish first; the others' last replies (a barrier,
  // say) must still reach them.
  constexpr auto kDrain = std::chrono::seconds(10);
  bool draining = false;
  Clock::time_point drain_until{};
  while (true) {
    if (draining && (s.clients.empty() || Clock::now() >= drain_until)) return;
    // Answer waiters whose keys are complete or whose time is up.
    int timeout = 1000;
    for (auto it = s.waiters.begin(); it != s.waiters.end();) {
      auto missing = missing_of(it->keys);
      if (missing.empty()) {
        reply_get(*it->client, it->keys);
        it = s.waiters.erase(it);
      } else if (Clock::now() >= it->deadline) {
        wire::Writer w;
        w.put(static_cast<std::uint8_t>(Status::timeout))
            .put(static_cast<std::uint32_t>(missing.size()));
        for (const auto& k : missing) w.put_string(k);
        auto f = frame(w.bytes());
        it->client->out.insert(it->client->out.end(), f.begin(), f.end());
        it = s.waiters.erase(it);
      } else {
        timeout = std::min(timeout, remaining_ms(it->deadline) + 1);
        ++it;
      }
    }

    if (draining) timeout = std::min(timeout, 100);
    std::vector<pollfd> fds;
    fds.push_back({wake_.get(), static_cast<short>(draining ? 0 : POLLIN), 0});
    fds.push_back({listener_.get(), static_cast<short>(draining ? 0 : POLLIN), 0});
    for (auto& c : s.clients)
      fds.push_back({c.fd.get(), static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
      log::warn("store server: poll failed: {}", net::errno_text(errno));
      return;
    }
    if (fds[0].revents & POLLIN) {
      draining = true;
      drain_until = Clock::now() + kDrain;
      listener_.reset();
      continue;
    }
    if (fds[1].revents & POLLIN) {
      while (true) {
        net::SocketAddress from;
        from.length = sizeof from.storage;
        int fd = ::accept4(listener_.get(), from.get(), &from.length, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        net::set_no_delay(fd);
        s.clients.push_back({net::Fd(fd), from.to_string(), {}, {}});
      }
    }
    std::size_t i = 2;
    for (auto it = s.clients.begin(); it != s.clients.end(); ++i) {
      State::Client& c = *it;
      const short revents = i < fds.size() ? fds[i].revents : 0;
      bool alive = true;
      if (revents & (POLLIN | POLLHUP | POLLERR)) {
        std::byte buf[65536];
        const ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, 0);
        if (n > 0) {
          c.in.insert(c.in.end(), buf, buf + n);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          alive = false;  // a client leaving is normal; nothing to report
        }
      }
      try {
        while (alive && c.in.size() >= 4) {
          std::uint32_t length;
          std::memcpy(&length, c.in.data(), 4);
          if (length > kMaxMessage)
            throw Error(ErrorCode::peer_failure,
                        fmt::format("store request of {} bytes from {}", length, c.peer));
          if (c.in.size() < 4 + std::size_t{length}) break;
          handle(c, std::span(c.in).subspan(4, length));
          c.in.erase(c.in.begin(), c.in.begin() + 4 + length);
        }
      } catch (const Error& e) {
        log::warn("store server: dropping client {}: {}", c.peer, e.what());
        alive = false;
      }
      if (alive && !c.out.empty() && (revents & POLLOUT)) {
        const ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (n > 0)
          c.out.erase(c.out.begin(), c.out.begin() + n);
        else if (n < 0 && errno != EAGAIN && errno != EINTR)
          alive = false;
      }
      it = alive ? std::next(it) : drop(it);
    }
  }
}

// ---- client -----------------------------------------------------------------

TcpStore::TcpStore(const std::string& host, std::uint16_t port, Deadline deadline,
                   std::unique_ptr<StoreServer> server)
    : server_(std::move(server)) {
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  url_ = fmt::format("tcp://{}:{}", v6 ? "[" + host + "]" : host, port);
  const net::SocketAddress address = net::resolve(host, port, "CHORUS_STORE");
  int last_error = 0;
  while (true) {
    net::Fd fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(fd.get(), address.get(), address.length) == 0) {
      net::set_no_delay(fd.get());
      net::set_nonblocking(fd.get());
      fd_ = std::move(fd);
      return;
    }
    last_error = errno;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw Error(ErrorCode::timeout,
              fmt::format("cannot reach the store at {} ({}); is rank 0 or the store server "
                          "running there?",
                          url_, net::errno_text(last_error)));
}

TcpStore::~TcpStore() = default;

Bytes TcpStore::call(std::vector<std::byte>& body, Deadline deadline) {
  auto request = frame(body);
  auto fail = [&](const std::string& why) -> Error {
    return Error(ErrorCode::peer_failure, fmt::format("store {}: {}", url_, why));
  };
  std::size_t sent = 0;
  std::vector<std::byte> in;
  std::uint32_t length = 0;
  while (true) {
    pollfd p{fd_.get(), static_cast<short>(POLLIN | (sent < request.size() ? POLLOUT : 0)), 0};
    const int ready = ::poll(&p, 1, remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0)
      throw Error(ErrorCode::timeout, fmt::format("store {} did not answer in time", url_));
    if (p.revents & POLLOUT) {
      const ssize_t n =
          ::send(fd_.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN) throw fail("send: " + net::errno_text(errno));
      if (n > 0) sent += static_cast<std::size_t>(n);
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      std::byte buf[65536];
      const ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
      if (n == 0) throw fail("the server closed the connection (did rank 0 exit?)");
      if (n < 0 && errno != EAGAIN) throw fail("recv: " + net::errno_text(errno));
      if (n > 0) in.insert(in.end(), buf, buf + n);
      if (in.size() >= 4) {
        std::memcpy(&length, in.data(), 4);
        if (length > kMaxMessage) throw fail("reply of " + std::to_string(length) + " bytes");
        if (in.size() >= 4 + std::size_t{length}) return Bytes(in.begin() + 4, in.end());
      }
    }
  }
}

void TcpStore::set(const std::string& key, std::span<const std::byte> value, Deadline deadline) {
  wire::Writer w;
  w.put(kMagic).put(static_cast<std::uint8_t>(Op::set)).put_string(key).put_bytes(value);
  const auto reply = call(w.bytes(), deadline);
  wire::Reader r(reply, "store reply");
  if (static_cast<Status>(r.get<std::uint8_t>()) != Status::ok)
    throw Error(ErrorCode::peer_failure, "store " + url_ + " refused set(" + key + ")");
}

std::vector<Bytes> TcpStore::get(std::span<const std::string> keys, Deadline deadline) {
  wire::Writer w;
  w.put(kMagic).put(static_cast<std::uint8_t>(Op::get));
  // The server answers at our deadline with the missing keys; we wait a
  // little longer for that answer.
  w.put(static_cast<std::uint32_t>(remaining_ms(deadline)));
  w.put(static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) w.put_string(k);
  const auto reply = call(w.bytes(), deadline + std::chrono::seconds(5));
  wire::Reader r(reply, "store reply from " + url_);
  const auto status = static_cast<Status>(r.get<std::uint8_t>());
  const auto n = r.get<std::uint32_t>();
  if (status == Status::timeout) {
    std::vector<std::string> missing;
    for (std::uint32_t i = 0; i < n; ++i) missing.push_back(r.get_string());
    std::string list;
    for (std::size_t i = 0; i < missing.size() && i < 16; ++i) list += (i ? ", " : "") + missing[i];
    if (missing.size() > 16) list += fmt::format(" and {} more", missing.size() - 16);
    throw StoreTimeout(fmt::format("store {}: keys never set: {}", url_, list), missing);
  }
  if (status != Status::ok || n != keys.size())
    throw Error(ErrorCode::peer_failure, "store " + url_ + ": malformed get reply");
  std::vector<Bytes> values;
  for (std::uint32_t i = 0; i < n; ++i) values.push_back(r.get_bytes());
  return values;
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta, Deadline deadline) {
  wire::Writer w;
  w.put(kMagic).put(static_cast<std::uint8_t>(Op::add)).put_string(key).put(delta);
  const auto reply = call(w.bytes(), deadline);
  wire::Reader r(reply, "store reply from " + url_);
  if (static_cast<Status>(r.get<std::uint8_t>()) != Status::ok)
    throw Error(ErrorCode::peer_failure, "store " + url_ + " refused add(" + key + ")");
  return r.get<std::int64_t>();
}

}  // namespace chorus::bootstrap
