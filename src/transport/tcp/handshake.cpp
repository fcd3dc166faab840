// Connecting the full mesh: rank i connects to every lower rank and accepts
// the higher ones; each new connection starts with a Hello each way
// (frames.hpp) that names the job, the sender and the rank it means, so a
// stray or stale process is refused (and told why, when it speaks Chorus).
#include "transport/tcp/address.hpp"
#include "transport/tcp/peer.hpp"

#include "common/logging.hpp"

#include <fmt/format.h>

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace chorus::transport {

using namespace tcp;

void TcpTransport::connect(std::span<const AddressBlob> addresses, Deadline deadline) {
  if (addresses.size() != static_cast<std::size_t>(size()))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("tcp connect: {} addresses for {} ranks", addresses.size(), size()));
  std::vector<net::SocketAddress> where;
  for (int r = 0; r < size(); ++r)
    where.push_back(decode_address(addresses[static_cast<std::size_t>(r)], r));
  job_id_ = job_id(addresses);
  for (int r = 0; r < size(); ++r)
    peers_[static_cast<std::size_t>(r)]->where =
        fmt::format("rank {} ({})", r, where[static_cast<std::size_t>(r)].to_string());

  // Outgoing: to every lower rank. Incoming: from every higher one.
  struct Link {
    net::Fd fd;
    int rank = -1;  // -1 for an incoming link not yet identified
    bool connecting = false;
    Clock::time_point retry_at{};
    std::string peer_text;
    std::size_t got = 0;
    std::byte received[sizeof(Hello)] = {};
    Hello hello{};
  };
  std::list<Link> links;
  auto start_connect = [&](Link& link) {
    const auto& a = where[static_cast<std::size_t>(link.rank)];
    link.fd = net::Fd(::socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    tune_socket(link.fd.get(), options_.socket_buffer);
    link.connecting = true;
    link.got = 0;
    if (::connect(link.fd.get(), a.get(), a.length) != 0 && errno != EINPROGRESS)
      link.retry_at = Clock::now() + std::chrono::milliseconds(50), link.fd.reset();
  };
  for (int r = 0; r < rank(); ++r) {
    links.emplace_back();
    links.back().rank = r;
    start_connect(links.back());
  }
  int established = 0;
  const int needed = size() - 1;
  auto establish = [&](int r, net::Fd fd) {
    Peer& p = *peers_[static_cast<std::size_t>(r)];
    p.fd = std::move(fd);
    net::set_no_delay(p.fd.get());
    ++established;
  };
  auto hello_to = [&](int to) { return make_hello(job_id_, rank(), to); };

  while (established < needed) {
    const auto now = Clock::now();
    if (now >= deadline) {
      std::string missing;
      for (int r = 0; r < size(); ++r)
        if (r != rank() && !peers_[static_cast<std::size_t>(r)]->fd)
          missing += (missing.empty() ? "" : ", ") + peers_[static_cast<std::size_t>(r)]->where;
      throw Error(ErrorCode::timeout,
                  fmt::format("rank {}: no TCP connection with {} before the deadline (are they "
                              "running, and can they reach {}?)",
                              rank(), missing, listen_address_.to_string()));
    }
    std::vector<pollfd> fds{{listener_.get(), POLLIN, 0}};
    std::vector<Link*> polled;
    for (auto& link : links) {
      if (!link.fd) {
        if (link.rank >= 0 && now >= link.retry_at) start_connect(link);
        continue;
      }
      fds.push_back({link.fd.get(), static_cast<short>(link.connecting ? POLLOUT : POLLIN), 0});
      polled.push_back(&link);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long>(wait.count(), 0, 20)));
    if (fds[0].revents & POLLIN) {
      while (true) {
        net::SocketAddress from;
        from.length = sizeof from.storage;
        const int fd =
            ::accept4(listener_.get(), from.get(), &from.length, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        links.emplace_back();
        links.back().fd = net::Fd(fd);
        links.back().peer_text = from.to_string();
      }
    }
    for (std::size_t i = 0; i < polled.size(); ++i) {
      Link& link = *polled[i];
      const short ev = fds[i + 1].revents;
      if (!ev) continue;
      if (link.connecting) {  // outgoing: connected, or failed
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(link.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {  // not listening yet, or refused: retry until the deadline
          link.fd.reset();
          link.retry_at = Clock::now() + std::chrono::milliseconds(50);
          continue;
        }
        const Hello h = hello_to(link.rank);
        if (::send(link.fd.get(), &h, sizeof h, MSG_NOSIGNAL) != sizeof h) {
          link.fd.reset();
          link.retry_at = Clock::now() + std::chrono::milliseconds(50);
          continue;
        }
        link.connecting = false;
        continue;
      }
      const ssize_t n = ::recv(link.fd.get(), link.received + link.got, sizeof(Hello) - link.got, 0);
      if (n <= 0) {
        if (n < 0 && errno == EAGAIN) continue;
        if (link.rank >= 0) {  // our outgoing link died before the reply: retry
          link.fd.reset();
          link.retry_at = Clock::now() + std::chrono::milliseconds(50);
        } else {
          link.fd.reset();  // an incoming stranger left
        }
        continue;
      }
      link.got += static_cast<std::size_t>(n);
      if (link.got < sizeof(Hello)) continue;
      link.hello = decode_hello(link.received);
      if (link.rank >= 0) {  // the reply to our hello
        std::string why = judge_hello(link.hello, job_id_, rank(), size());
        if (why.empty() && static_cast<int>(link.hello.from) != link.rank)
          why = fmt::format("answered as rank {}", link.hello.from);
        if (!why.empty())
          throw Error(ErrorCode::peer_failure,
                      fmt::format("rank {}: {} refused the handshake: {}", rank(),
                                  peers_[static_cast<std::size_t>(link.rank)]->where, why));
        establish(link.rank, std::move(link.fd));
        continue;
      }
      std::string why = judge_hello(link.hello, job_id_, rank(), size());
      const int from = static_cast<int>(link.hello.from);
      if (why.empty() && from <= rank())
        why = fmt::format("rank {} should be accepted by it, not connect", from);
      if (why.empty() && peers_[static_cast<std::size_t>(from)]->fd)
        why = fmt::format("rank {} is already connected", from);
      if (!why.empty()) {
        log::warn("tcp: rank {} refused a connection from {}: {}", rank(), link.peer_text, why);
        // A chorus peer that computed another job identity read other addresses
        // than this rank did (a stale store, or two jobs sharing one). Tell it
        // who answered, so that it fails now, naming this rank, instead of
        // retrying until its deadline.
        if (speaks_chorus(link.hello) && link.hello.job != job_id_) {
          const Hello mine = hello_to(static_cast<int>(link.hello.from));
          (void)::send(link.fd.get(), &mine, sizeof mine, MSG_NOSIGNAL);
        }
        link.fd.reset();
        continue;
      }
      const Hello reply = hello_to(from);
      if (::send(link.fd.get(), &reply, sizeof reply, MSG_NOSIGNAL) != sizeof reply) {
        link.fd.reset();
        continue;
      }
      establish(from, std::move(link.fd));
    }
    links.remove_if([](const Link& l) { return !l.fd && l.rank < 0; });
    links.remove_if(
        [&](const Link& l) { return l.rank >= 0 && peers_[static_cast<std::size_t>(l.rank)]->fd; });
  }

  // From here on, one epoll set drives everything.
  auto add = [&](int fd, std::uint64_t key) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = key;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      throw Error(ErrorCode::transport_error, "epoll_ctl: " + net::errno_text(errno));
  };
  add(listener_.get(), ~std::uint64_t{0});
  for (int r = 0; r < size(); ++r)
    if (r != rank())
      add(peers_[static_cast<std::size_t>(r)]->fd.get(), static_cast<std::uint64_t>(r));
  connected_ = true;
  log::trace("tcp: rank {} connected to {} peers", rank(), needed);
}

}  // namespace chorus::transport
