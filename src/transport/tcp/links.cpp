// Links between ranks: opening them (eagerly, the full mesh at connect(), or
// lazily, at the first message to or from a peer), the challenge-response
// of frames.hpp on every new connection, and accepting. A stray, stale or
// impostor process is refused (and told why, when it speaks Chorus and
// belongs to another job); it never takes the place of the rank it claims.
//
// When two ranks open links to each other at once, the one opened by the
// lower rank wins: the lower rank answers the higher one's Hello with
// kDuplicate ("use mine"), and the higher rank, receiving the lower one's
// Hello while its own link is pending, drops its own.
#include "transport/tcp/address.hpp"
#include "transport/tcp/peer.hpp"

#include "common/config.hpp"
#include "common/logging.hpp"

#include <fmt/format.h>

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace chorus::transport {

using namespace tcp;

namespace {

constexpr auto kRetryPause = std::chrono::milliseconds(50);
constexpr auto kHandshakeTime = std::chrono::seconds(10);
// A lazy link to a peer that does not answer fails that peer after this.
constexpr auto kLazyPatience = std::chrono::seconds(5);
constexpr std::uint64_t kListenerKey = ~std::uint64_t{0};
constexpr std::uint64_t kIncomingKey = std::uint64_t{1} << 62;  // | the Incoming's address
constexpr std::uint8_t kDuplicate = 1;                          // in Hello::reserved[0]

bool send_all(const net::Fd& fd, const void* data, std::size_t bytes) {
  return ::send(fd.get(), data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(bytes);
}

}  // namespace

bool TcpTransport::lazy_links(int size) {
  return lazy_by_setting(config::Variable::socket_connect, size);
}

TcpTransport::Peer& TcpTransport::peer_at(int r) {
  auto& slot = peers_[static_cast<std::size_t>(r)];
  if (!slot) {
    slot = std::make_unique<Peer>();
    slot->rank = r;
    slot->where = where_of(r);
    if (!aborted_.empty() && r != rank()) {
      slot->dead = true;
      slot->dead_reason = aborted_;
    }
  }
  return *slot;
}

std::string TcpTransport::where_of(int r) const {
  if (addresses_.empty() || r == rank() || addresses_[static_cast<std::size_t>(r)].empty())
    return fmt::format("rank {}", r);
  return fmt::format("rank {} ({})", r,
                     decode_address(addresses_[static_cast<std::size_t>(r)], r).to_string());
}

void TcpTransport::connect(std::span<const AddressBlob> addresses, Deadline deadline) {
  if (addresses.size() != static_cast<std::size_t>(size()))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("tcp connect: {} addresses for {} ranks", addresses.size(), size()));
  for (int r = 0; r < size(); ++r)  // every blob usable, or an error naming its rank
    (void)decode_address(addresses[static_cast<std::size_t>(r)], r);
  addresses_.assign(addresses.begin(), addresses.end());
  lazy_ = lazy_links(size());
  start(deadline);
}

void TcpTransport::connect_looking_up(const AddressBlob& rank0, AddressLookup lookup,
                                      Deadline deadline) {
  if (!lazy_links(size()))
    throw Error(ErrorCode::invalid_argument,
                "tcp: looking addresses up when needed takes links that open lazily "
                "(CHORUS_SOCKET_CONNECT=lazy, or auto beyond 64 ranks)");
  if (!lookup) throw Error(ErrorCode::invalid_argument, "tcp connect_looking_up: no lookup");
  (void)decode_address(rank0, 0);
  addresses_.assign(static_cast<std::size_t>(size()), AddressBlob{});
  addresses_[0] = rank0;
  addresses_[static_cast<std::size_t>(rank())] = address();
  lookup_ = std::move(lookup);
  lazy_ = true;
  start(deadline);
}

void TcpTransport::start(Deadline deadline) {
  link_key_ = link_key(addresses_[0], options_.secret);
  job_id_ = link_key_->fingerprint();
  for (auto& p : peers_)
    if (p) p->where = where_of(p->rank);

  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerKey;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &ev) != 0)
    throw Error(ErrorCode::transport_error, "epoll_ctl: " + net::errno_text(errno));
  connected_ = true;
  if (lazy_) {
    log::trace("tcp: rank {} of {}: links open at the first message", rank(), size());
    return;
  }

  // The full mesh: links to every lower rank; the higher ones link to us.
  for (int r = 0; r < rank(); ++r) start_link(peer_at(r), deadline);
  while (true) {
    int established = 0, missing = 0;
    std::string which;
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      Peer& p = peer_at(r);
      if (p.dead) throw Error(ErrorCode::peer_failure, fmt::format("rank {}: {}", rank(), p.dead_reason));
      if (p.link == Peer::Link::established) {
        ++established;
      } else if (++missing <= 8) {
        which += (which.empty() ? "" : ", ") + p.where;
      }
    }
    if (established == size() - 1) break;
    if (Clock::now() >= deadline) {
      if (missing > 8) which += fmt::format(" and {} more", missing - 8);
      throw Error(ErrorCode::timeout,
                  fmt::format("rank {}: no TCP connection with {} before the deadline (are they "
                              "running, and can they reach {}?)",
                              rank(), which, listen_address_.to_string()));
    }
    handle_events(20);
  }
  log::trace("tcp: rank {} connected to {} peers", rank(), size() - 1);
}

// ---- outgoing ---------------------------------------------------------------

void TcpTransport::want_link(Peer& peer) {
  if (lazy_ && connected_ && peer.rank != rank() && !peer.dead &&
      peer.link == Peer::Link::none && peer.incoming_pending == 0 && !peer.retrying)
    start_link(peer, Clock::now() + kLazyPatience);
}

void TcpTransport::start_link(Peer& peer, Clock::time_point give_up_at) {
  peer.give_up_at = give_up_at;
  open_link(peer);
}

bool TcpTransport::look_up(Peer& peer) {
  auto& blob = addresses_[static_cast<std::size_t>(peer.rank)];
  if (!blob.empty()) return true;
  try {
    AddressBlob found = lookup_(peer.rank, peer.give_up_at);
    (void)decode_address(found, peer.rank);
    blob = std::move(found);
  } catch (const std::exception& e) {
    fail_peer(peer, fmt::format("cannot look up rank {}'s address: {}", peer.rank, e.what()));
    return false;
  }
  peer.where = where_of(peer.rank);
  return true;
}

void TcpTransport::open_link(Peer& peer) {
  if (!look_up(peer)) return;
  const net::SocketAddress a = decode_address(addresses_[static_cast<std::size_t>(peer.rank)], peer.rank);
  peer.fd = net::Fd(::socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!peer.fd) return link_failed(peer, "socket: " + net::errno_text(errno));
  tune_socket(peer.fd.get(), options_.socket_buffer);
  peer.link = Peer::Link::connecting;
  peer.got = 0;
  if (::connect(peer.fd.get(), a.get(), a.length) != 0 && errno != EINPROGRESS)
    return link_failed(peer, "connect: " + net::errno_text(errno));
  epoll_event ev{};
  ev.events = EPOLLOUT;
  ev.data.u64 = static_cast<std::uint64_t>(peer.rank);
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, peer.fd.get(), &ev);
  peer.events = EPOLLOUT;
}

void TcpTransport::close_link(Peer& peer) {
  if (peer.fd) {
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, peer.fd.get(), nullptr);
    peer.fd.reset();
  }
  peer.link = Peer::Link::none;
  peer.events = 0;
}

void TcpTransport::retry_link(Peer& peer, Clock::duration after) {
  peer.retry_at = Clock::now() + after;
  if (!peer.retrying) retrying_.push_back(peer.rank);
  peer.retrying = true;
}

// Not listening (yet), refused, or dropped during the handshake: try again
// until the link's patience runs out, then the peer has failed.
void TcpTransport::link_failed(Peer& peer, const std::string& why) {
  close_link(peer);
  if (Clock::now() >= peer.give_up_at)
    return fail_peer(peer, fmt::format("cannot connect to {}: {}", peer.where, why));
  retry_link(peer, kRetryPause);
}

void TcpTransport::on_link_event(Peer& peer) {
  if (peer.link == Peer::Link::connecting) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(peer.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return link_failed(peer, net::errno_text(err));
    peer.sent = make_hello(job_id_, rank(), peer.rank, auth::random_nonce());
    if (!send_all(peer.fd, &peer.sent, sizeof peer.sent))
      return link_failed(peer, "sending the handshake: " + net::errno_text(errno));
    peer.link = Peer::Link::await_reply;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = static_cast<std::uint64_t>(peer.rank);
    epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, peer.fd.get(), &ev);
    peer.events = EPOLLIN;
    return;
  }
  // Awaiting the acceptor's Hello and proof.
  const ssize_t n = ::recv(peer.fd.get(), peer.received + peer.got, sizeof(Hello) - peer.got, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0)
    return link_failed(peer, n == 0 ? "it closed the connection during the handshake"
                                    : net::errno_text(errno));
  peer.got += static_cast<std::size_t>(n);
  if (peer.got < sizeof(Hello)) return;
  const Hello h = decode_hello(peer.received);
  std::string why = judge_hello(h, job_id_, rank(), size());
  if (why.empty() && static_cast<int>(h.from) != peer.rank)
    why = fmt::format("answered as rank {}", h.from);
  if (why.empty() && h.reserved[0] == kDuplicate) {
    // Its own link to us wins (it is the lower rank): that one is on its
    // way. Should it never come, try again later.
    close_link(peer);
    peer.give_up_at = std::max(peer.give_up_at, Clock::now() + kLazyPatience);
    retry_link(peer, std::chrono::seconds(1));
    return;
  }
  if (why.empty() && !auth::same(h.proof, link_proof(*link_key_, true, peer.sent, h)))
    why = "its proof of the job's link key is wrong (not a rank of this job)";
  if (!why.empty()) {
    close_link(peer);
    return fail_peer(peer, fmt::format("{} refused the handshake: {}", peer.where, why));
  }
  const auth::Digest proof = link_proof(*link_key_, false, peer.sent, h);
  if (!send_all(peer.fd, proof.data(), proof.size()))
    return link_failed(peer, "sending the proof: " + net::errno_text(errno));
  link_established(peer);
}

void TcpTransport::link_established(Peer& peer) {
  peer.link = Peer::Link::established;
  net::set_no_delay(peer.fd.get());
  update_interest(peer);
  write_to(peer);
}

// ---- incoming ---------------------------------------------------------------

void TcpTransport::accept_incoming() {
  const std::size_t cap = static_cast<std::size_t>(std::max(64, 2 * size()));
  while (true) {
    net::SocketAddress from;
    from.length = sizeof from.storage;
    const int fd = ::accept4(listener_.get(), from.get(), &from.length, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The listener stays readable: stop watching it for a moment
        // instead of spinning (and say so every few seconds, not at every
        // pause).
        if (Clock::now() - said_cannot_accept_ > std::chrono::seconds(5)) {
          log::warn("tcp: rank {} cannot accept connections: {}; {} unidentified connections "
                    "held; trying again every {} ms",
                    rank(), net::errno_text(errno), incoming_.size(), kRetryPause.count());
          said_cannot_accept_ = Clock::now();
        }
        epoll_event ev{};
        ev.data.u64 = kListenerKey;
        epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listener_.get(), &ev);
        accept_paused_until_ = Clock::now() + kRetryPause;
      }
      return;
    }
    if (incoming_.size() >= cap) {  // a flood: honest peers retry
      if (Clock::now() - last_refusal_log_ > std::chrono::seconds(1))
        log::warn("tcp: rank {} refused a connection from {}: {} unidentified connections already",
                  rank(), from.to_string(), incoming_.size());
      last_refusal_log_ = Clock::now();
      ::close(fd);
      continue;
    }
    Incoming& in = incoming_.emplace_back();
    in.fd = net::Fd(fd);
    in.from = from.to_string();
    in.give_up_at = Clock::now() + kHandshakeTime;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kIncomingKey | reinterpret_cast<std::uintptr_t>(&in);
    epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
  }
}

void TcpTransport::drop_incoming(Incoming& in) {
  if (in.stage == Incoming::Stage::proof) {
    Peer& p = peer_at(in.rank);
    --p.incoming_pending;
    // It was to be the link: with messages waiting, open one ourselves.
    if (!p.sendq.empty() || !p.posted.empty()) want_link(p);
  }
  if (in.fd) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, in.fd.get(), nullptr);
  incoming_.remove_if([&](const Incoming& x) { return &x == &in; });
}

void TcpTransport::on_incoming_event(Incoming& in) {
  const std::size_t want = in.stage == Incoming::Stage::proof ? kProofBytes : sizeof(Hello);
  const ssize_t n = ::recv(in.fd.get(), in.received + in.got, want - in.got, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) return drop_incoming(in);  // a stranger that left, or a duplicate dropped
  in.got += static_cast<std::size_t>(n);
  if (in.got < want) return;
  in.got = 0;

  if (in.stage == Incoming::Stage::proof) {
    auth::Digest proof{};
    std::memcpy(proof.data(), in.received, proof.size());
    Peer& p = peer_at(in.rank);
    std::string why;
    if (!auth::same(proof, link_proof(*link_key_, false, in.hello, in.sent)))
      why = "its proof of the job's link key is wrong (not a rank of this job)";
    else if (p.link == Peer::Link::established)
      why = fmt::format("rank {} is already connected", in.rank);
    else if (p.dead)
      why = fmt::format("rank {} has failed here: {}", in.rank, p.dead_reason);
    if (!why.empty()) {
      log::warn("tcp: rank {} refused a connection from {} claiming rank {}: {}", rank(), in.from,
                in.rank, why);
      return drop_incoming(in);
    }
    // Proven: this connection is the link (ours, if pending, gives way).
    --p.incoming_pending;
    in.stage = Incoming::Stage::hello;  // nothing pending any more
    close_link(p);
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, in.fd.get(), nullptr);
    p.fd = std::move(in.fd);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = static_cast<std::uint64_t>(p.rank);
    epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, p.fd.get(), &ev);
    p.events = EPOLLIN;
    drop_incoming(in);
    link_established(p);
    return;
  }

  in.hello = decode_hello(in.received);
  std::string why = judge_hello(in.hello, job_id_, rank(), size());
  const int from = static_cast<int>(in.hello.from);
  if (why.empty() && from == rank()) why = "it claims to be this rank";
  if (why.empty() && !lazy_ && from <= rank())
    why = fmt::format("rank {} should be accepted by it, not connect", from);
  if (why.empty()) {
    Peer& p = peer_at(from);
    if (p.dead) {
      why = fmt::format("rank {} has failed here: {}", from, p.dead_reason);
    } else if (lazy_ && (p.link == Peer::Link::established ||
                         (p.link != Peer::Link::none && rank() < from))) {
      // Both opened a link; ours (the lower rank's) wins, or has already.
      // Say so: the other side drops its own without failing.
      Hello duplicate = make_hello(job_id_, rank(), from, auth::random_nonce());
      duplicate.reserved[0] = kDuplicate;
      (void)send_all(in.fd, &duplicate, sizeof duplicate);
      return drop_incoming(in);
    } else if (p.link == Peer::Link::established) {
      why = fmt::format("rank {} is already connected", from);
    }
  }
  if (!why.empty()) {
    log::warn("tcp: rank {} refused a connection from {}: {}", rank(), in.from, why);
    // A Chorus peer of another job (a stale store, or two jobs sharing one)
    // learns so at once from our fingerprint, instead of retrying until its
    // deadline. The fingerprint proves nothing.
    if (speaks_chorus(in.hello) && in.hello.job != job_id_) {
      const Hello mine = make_hello(job_id_, rank(), from, auth::random_nonce());
      (void)send_all(in.fd, &mine, sizeof mine);
    }
    return drop_incoming(in);
  }
  in.rank = from;
  in.sent = make_hello(job_id_, rank(), from, auth::random_nonce());
  in.sent.proof = link_proof(*link_key_, true, in.hello, in.sent);
  if (!send_all(in.fd, &in.sent, sizeof in.sent)) return drop_incoming(in);
  in.stage = Incoming::Stage::proof;
  in.give_up_at = Clock::now() + kHandshakeTime;  // the peer's turn: its proof
  ++peer_at(from).incoming_pending;
}

// ---- the event loop's share -----------------------------------------------------

bool TcpTransport::on_link_key(std::uint64_t key, std::uint32_t events) {
  if (key == kListenerKey) {
    accept_incoming();
    return true;
  }
  if (key & kIncomingKey) {
    auto* in = reinterpret_cast<Incoming*>(static_cast<std::uintptr_t>(key & ~kIncomingKey));
    // The entry may be gone (dropped earlier in this batch): look it up.
    for (auto& x : incoming_)
      if (&x == in) return on_incoming_event(x), true;
    return true;
  }
  Peer& peer = peer_at(static_cast<int>(key));
  if (peer.link == Peer::Link::established || peer.dead) return false;
  (void)events;
  on_link_event(peer);
  return true;
}

int TcpTransport::link_housekeeping(int timeout_ms) {
  // Called by every progress(): nothing pending costs no clock read.
  if (incoming_.empty() && retrying_.empty() && accept_paused_until_ == Clock::time_point{})
    return timeout_ms;
  const auto now = Clock::now();
  bool busy = false;
  if (accept_paused_until_ != Clock::time_point{}) {
    if (now >= accept_paused_until_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenerKey;
      epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listener_.get(), &ev);
      accept_paused_until_ = {};
    } else {
      busy = true;
    }
  }
  for (auto it = incoming_.begin(); it != incoming_.end();) {
    auto next = std::next(it);
    if (now >= it->give_up_at) {
      // Read what has arrived first: a rank that could not run for a while
      // (ranks outnumber cores) must not drop a peer whose handshake waits
      // unread in the socket.
      Incoming* in = &*it;
      const auto stage = in->stage;
      const std::size_t got = in->got;
      on_incoming_event(*in);  // may finish it, move it on, or drop it
      const bool still_there = std::any_of(incoming_.begin(), incoming_.end(),
                                           [&](const Incoming& x) { return &x == in; });
      if (still_there && in->stage == stage && in->got == got) {
        log::warn("tcp: rank {} dropped a connection from {}: no handshake within {} s", rank(),
                  in->from, kHandshakeTime.count());
        drop_incoming(*in);
      }
    }
    it = next;
  }
  busy |= !incoming_.empty();
  for (std::size_t i = 0; i < retrying_.size();) {
    Peer& p = peer_at(retrying_[i]);
    if (p.dead || p.link != Peer::Link::none || p.incoming_pending > 0) {
      p.retrying = false;
      retrying_[i] = retrying_.back();
      retrying_.pop_back();
      continue;
    }
    if (now >= p.retry_at) {
      p.retrying = false;
      retrying_[i] = retrying_.back();
      retrying_.pop_back();
      open_link(p);
      continue;
    }
    busy = true;
    ++i;
  }
  return busy ? std::min(timeout_ms, 20) : timeout_ms;
}

}  // namespace chorus::transport
