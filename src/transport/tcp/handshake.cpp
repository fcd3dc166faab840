// Connecting the full mesh: rank i connects to every lower rank and accepts
// the higher ones; each new connection starts with the challenge-response of
// frames.hpp (a Hello each way, then the connector's proof), so a stray,
// stale or impostor process is refused (and told why, when it speaks Chorus
// and belongs to another job).
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
  link_key_ = link_key(addresses, options_.secret);
  job_id_ = link_key_->fingerprint();
  for (int r = 0; r < size(); ++r)
    peers_[static_cast<std::size_t>(r)]->where =
        fmt::format("rank {} ({})", r, where[static_cast<std::size_t>(r)].to_string());

  // Outgoing: to every lower rank. Incoming: from every higher one.
  enum class Stage {
    connecting,   // outgoing: the TCP connect is in flight
    await_reply,  // outgoing: our Hello went; the acceptor's Hello and proof come next
    await_hello,  // incoming: the connector's Hello comes first
    await_proof,  // incoming: we answered; the connector's proof comes next
  };
  struct Link {
    net::Fd fd;
    int rank = -1;  // the rank it is (outgoing) or claims to be (incoming, once heard)
    bool outgoing = false;
    Stage stage = Stage::await_hello;
    Clock::time_point retry_at{};
    Clock::time_point give_up_at{};  // incoming: the handshake must be done by then
    std::string peer_text;
    std::size_t got = 0;
    std::byte received[sizeof(Hello)] = {};
    Hello sent{};  // our Hello on this link
    Hello hello{};  // theirs
  };
  // Incoming connections that have not proved themselves are capped and
  // timed, so that a flood or a silent stranger cannot hold the set-up.
  const std::size_t max_unproven = static_cast<std::size_t>(std::max(64, 2 * size()));
  constexpr auto kHandshakeTime = std::chrono::seconds(10);
  std::list<Link> links;
  auto retry_later = [](Link& link) {
    link.fd.reset();
    link.retry_at = Clock::now() + std::chrono::milliseconds(50);
  };
  auto start_connect = [&](Link& link) {
    const auto& a = where[static_cast<std::size_t>(link.rank)];
    link.fd = net::Fd(::socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    tune_socket(link.fd.get(), options_.socket_buffer);
    link.stage = Stage::connecting;
    link.got = 0;
    if (::connect(link.fd.get(), a.get(), a.length) != 0 && errno != EINPROGRESS) retry_later(link);
  };
  for (int r = 0; r < rank(); ++r) {
    Link& link = links.emplace_back();
    link.rank = r;
    link.outgoing = true;
    start_connect(link);
  }
  int established = 0;
  const int needed = size() - 1;
  auto establish = [&](int r, net::Fd fd) {
    Peer& p = *peers_[static_cast<std::size_t>(r)];
    p.fd = std::move(fd);
    net::set_no_delay(p.fd.get());
    ++established;
  };
  auto send_all = [](const net::Fd& fd, const void* data, std::size_t bytes) {
    return ::send(fd.get(), data, bytes, MSG_NOSIGNAL) == static_cast<ssize_t>(bytes);
  };
  Clock::time_point accept_paused_until{};

  while (established < needed) {
    const auto now = Clock::now();
    if (now >= deadline) {
      std::string missing;
      int count = 0;
      for (int r = 0; r < size(); ++r) {
        if (r == rank() || peers_[static_cast<std::size_t>(r)]->fd) continue;
        if (++count <= 8)
          missing += (missing.empty() ? "" : ", ") + peers_[static_cast<std::size_t>(r)]->where;
      }
      if (count > 8) missing += fmt::format(" and {} more", count - 8);
      throw Error(ErrorCode::timeout,
                  fmt::format("rank {}: no TCP connection with {} before the deadline (are they "
                              "running, and can they reach {}?)",
                              rank(), missing, listen_address_.to_string()));
    }
    const bool accepting = now >= accept_paused_until;
    std::vector<pollfd> fds{{listener_.get(), static_cast<short>(accepting ? POLLIN : 0), 0}};
    std::vector<Link*> polled;
    for (auto& link : links) {
      if (!link.fd) {
        if (link.outgoing && now >= link.retry_at) start_connect(link);
        continue;
      }
      if (!link.outgoing && now >= link.give_up_at) {
        log::warn("tcp: rank {} dropped a connection from {}: no handshake within {} s", rank(),
                  link.peer_text, kHandshakeTime.count());
        link.fd.reset();
        continue;
      }
      fds.push_back(
          {link.fd.get(), static_cast<short>(link.stage == Stage::connecting ? POLLOUT : POLLIN), 0});
      polled.push_back(&link);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long>(wait.count(), 0, 20)));
    if (fds[0].revents & POLLIN) {
      std::size_t unproven = static_cast<std::size_t>(
          std::count_if(links.begin(), links.end(), [](const Link& l) { return !l.outgoing; }));
      while (true) {
        net::SocketAddress from;
        from.length = sizeof from.storage;
        const int fd =
            ::accept4(listener_.get(), from.get(), &from.length, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            // The listener stays readable: pause accepting instead of spinning.
            log::warn("tcp: rank {} cannot accept connections: {}", rank(), net::errno_text(errno));
            accept_paused_until = Clock::now() + std::chrono::milliseconds(50);
          }
          break;
        }
        if (unproven >= max_unproven) {  // honest peers retry
          log::warn("tcp: rank {} refused a connection from {}: {} unidentified connections "
                    "already",
                    rank(), from.to_string(), unproven);
          ::close(fd);
          continue;
        }
        ++unproven;
        Link& link = links.emplace_back();
        link.fd = net::Fd(fd);
        link.peer_text = from.to_string();
        link.give_up_at = Clock::now() + kHandshakeTime;
      }
    }
    for (std::size_t i = 0; i < polled.size(); ++i) {
      Link& link = *polled[i];
      const short ev = fds[i + 1].revents;
      if (!ev) continue;
      if (link.stage == Stage::connecting) {  // outgoing: connected, or failed
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(link.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        link.sent = make_hello(job_id_, rank(), link.rank, auth::random_nonce());
        // Not listening yet, or refused: retry until the deadline.
        if (err != 0 || !send_all(link.fd, &link.sent, sizeof link.sent)) {
          retry_later(link);
          continue;
        }
        link.stage = Stage::await_reply;
        continue;
      }
      const std::size_t want = link.stage == Stage::await_proof ? kProofBytes : sizeof(Hello);
      const ssize_t n = ::recv(link.fd.get(), link.received + link.got, want - link.got, 0);
      if (n <= 0) {
        if (n < 0 && errno == EAGAIN) continue;
        if (link.outgoing)
          retry_later(link);  // our link died before the reply: retry
        else
          link.fd.reset();  // an incoming stranger left
        continue;
      }
      link.got += static_cast<std::size_t>(n);
      if (link.got < want) continue;
      link.got = 0;

      if (link.stage == Stage::await_reply) {  // the acceptor's Hello and proof
        link.hello = decode_hello(link.received);
        std::string why = judge_hello(link.hello, job_id_, rank(), size());
        if (why.empty() && static_cast<int>(link.hello.from) != link.rank)
          why = fmt::format("answered as rank {}", link.hello.from);
        if (why.empty() &&
            !auth::same(link.hello.proof, link_proof(*link_key_, true, link.sent, link.hello)))
          why = "its proof of the job's link key is wrong (not a rank of this job)";
        if (!why.empty())
          throw Error(ErrorCode::peer_failure,
                      fmt::format("rank {}: {} refused the handshake: {}", rank(),
                                  peers_[static_cast<std::size_t>(link.rank)]->where, why));
        const auth::Digest proof = link_proof(*link_key_, false, link.sent, link.hello);
        if (!send_all(link.fd, proof.data(), proof.size())) {
          retry_later(link);
          continue;
        }
        establish(link.rank, std::move(link.fd));
        continue;
      }

      if (link.stage == Stage::await_proof) {  // the connector's proof
        auth::Digest proof{};
        std::memcpy(proof.data(), link.received, proof.size());
        const int from = link.rank;
        std::string why;
        if (!auth::same(proof, link_proof(*link_key_, false, link.hello, link.sent)))
          why = "its proof of the job's link key is wrong (not a rank of this job)";
        else if (peers_[static_cast<std::size_t>(from)]->fd)
          why = fmt::format("rank {} is already connected", from);
        if (!why.empty()) {
          log::warn("tcp: rank {} refused a connection from {} claiming rank {}: {}", rank(),
                    link.peer_text, from, why);
          link.fd.reset();
          continue;
        }
        establish(from, std::move(link.fd));
        continue;
      }

      // An incoming Hello.
      link.hello = decode_hello(link.received);
      std::string why = judge_hello(link.hello, job_id_, rank(), size());
      const int from = static_cast<int>(link.hello.from);
      if (why.empty() && from <= rank())
        why = fmt::format("rank {} should be accepted by it, not connect", from);
      if (why.empty() && peers_[static_cast<std::size_t>(from)]->fd)
        why = fmt::format("rank {} is already connected", from);
      if (!why.empty()) {
        log::warn("tcp: rank {} refused a connection from {}: {}", rank(), link.peer_text, why);
        // A chorus peer of another job (a stale store, or two jobs sharing
        // one) learns so at once, from our fingerprint, instead of retrying
        // until its deadline. The fingerprint proves nothing.
        if (speaks_chorus(link.hello) && link.hello.job != job_id_) {
          const Hello mine = make_hello(job_id_, rank(), from, auth::random_nonce());
          (void)send_all(link.fd, &mine, sizeof mine);
        }
        link.fd.reset();
        continue;
      }
      link.rank = from;
      link.sent = make_hello(job_id_, rank(), from, auth::random_nonce());
      link.sent.proof = link_proof(*link_key_, true, link.hello, link.sent);
      if (!send_all(link.fd, &link.sent, sizeof link.sent)) {
        link.fd.reset();
        continue;
      }
      link.stage = Stage::await_proof;
    }
    links.remove_if([](const Link& l) { return !l.fd && !l.outgoing; });
    links.remove_if([&](const Link& l) {
      return l.outgoing && peers_[static_cast<std::size_t>(l.rank)]->fd;
    });
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
    if (r != rank()) {
      add(peers_[static_cast<std::size_t>(r)]->fd.get(), static_cast<std::uint64_t>(r));
      peers_[static_cast<std::size_t>(r)]->events = EPOLLIN;
    }
  connected_ = true;
  log::trace("tcp: rank {} connected to {} peers", rank(), needed);
}

}  // namespace chorus::transport
