// The TCP transport (tcp_transport.hpp): construction, posting sends and
// receives, and failure. Connecting is handshake.cpp's, the event loop
// event_loop.cpp's, the receiving protocol protocol.cpp's, the wire format
// frames.cpp's, interface choice address.cpp's.
#include "transport/tcp/tcp_transport.hpp"

#include "common/config.hpp"
#include "common/logging.hpp"
#include "transport/tcp/address.hpp"
#include "transport/tcp/peer.hpp"

#include <fmt/format.h>

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace chorus::transport {

using namespace tcp;

// ---- construction -------------------------------------------------------------

TcpTransport::TcpTransport(int rank, int size, Options options)
    : Transport(rank, size), options_(options) {
  options_.socket_buffer = socket_buffer_bytes(options_.socket_buffer);
  if (!options_.secret) options_.secret = auth::Secret::from_env();
  const auth::Nonce random = auth::random_nonce();
  std::memcpy(&nonce_, random.data(), sizeof nonce_);
  listen_address_ = choose_local_address();
  listener_ = net::listen_on(listen_address_, std::max(size, 16));
  net::set_nonblocking(listener_.get());
  tune_socket(listener_.get(), options_.socket_buffer);
  epoll_ = net::Fd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) throw Error(ErrorCode::transport_error, "epoll_create1: " + net::errno_text(errno));
  peers_.resize(static_cast<std::size_t>(size));  // each made at first use: peer_at()
  max_unexpected_ = config::byte_count(config::Variable::socket_unexpected_bytes, 64u << 20,
                                       1u << 20, std::size_t{1} << 40);
  log::trace("tcp: rank {} listening on {}", rank, listen_address_.to_string());
}

TcpTransport::~TcpTransport() = default;

AddressBlob TcpTransport::address() { return encode_address(listen_address_, nonce_); }

// ---- posting ----------------------------------------------------------------

RequestPtr TcpTransport::isend(int peer_rank, Tag tag, const void* buf, std::size_t bytes) {
  check_message("isend", peer_rank, tag, buf, bytes);
  if (peer_rank == rank()) return self_send(tag, buf, bytes);
  auto request = std::make_shared<Request>(true, peer_rank, tag, bytes);
  Peer& peer = peer_at(peer_rank);
  if (peer.dead || !connected_) {
    request->fail(ErrorCode::peer_failure,
                  fmt::format("rank {}: cannot send to {}: {}", rank(), peer.where,
                              connected_ ? peer.dead_reason : "the transport is not connected"));
    return request;
  }
  const auto* data = static_cast<const std::byte*>(buf);
  if (bytes <= options_.eager_limit) {
    queue_frame(peer.sendq,
                {make_header(FrameType::eager, tag, bytes, 0), data, bytes, 0, request, {}});
  } else {
    const std::uint64_t id = next_send_id_++;
    peer.rndv_sends[id] = {request, data, bytes};
    queue_frame(peer.sendq,
                {make_header(FrameType::rts, tag, bytes, id), nullptr, 0, 0, nullptr, {}});
  }
  want_link(peer);
  write_to(peer);
  return request;
}

RequestPtr TcpTransport::self_send(Tag tag, const void* buf, std::size_t bytes) {
  auto request = std::make_shared<Request>(true, rank(), tag, bytes);
  Peer& self = peer_at(rank());
  const auto* data = static_cast<const std::byte*>(buf);
  if (auto receive = take_first(self.posted, [&](const PostedReceive& r) { return r.tag == tag; })) {
    deliver(*receive, rank(), data, bytes);
    request->complete();
    return request;
  }
  Unexpected u{tag, bytes};
  u.ready = true;
  if (bytes <= options_.eager_limit) {
    u.data.assign(data, data + bytes);
    request->complete();
  } else {
    u.self_buf = data;
    u.self_send = request;
  }
  self.unexpected.push_back(std::move(u));
  return request;
}

std::size_t TcpTransport::unexpected_bytes(int peer) const {
  const auto& p = peers_.at(static_cast<std::size_t>(peer));
  return p ? p->unexpected_bytes : 0;
}

bool TcpTransport::probe(int peer_rank, Tag tag) {
  check_message("probe", peer_rank, tag, nullptr, 0);
  for (const Unexpected& u : peer_at(peer_rank).unexpected)
    if (u.tag == tag && !u.claimed) return true;
  return false;
}

RequestPtr TcpTransport::irecv(int peer_rank, Tag tag, void* buf, std::size_t bytes) {
  check_message("irecv", peer_rank, tag, buf, bytes);
  auto request = std::make_shared<Request>(false, peer_rank, tag, bytes);
  Peer& peer = peer_at(peer_rank);
  PostedReceive receive{peer_rank, tag, static_cast<std::byte*>(buf), bytes, request};
  for (auto it = peer.unexpected.begin(); it != peer.unexpected.end(); ++it) {
    Unexpected& u = *it;
    if (u.tag != tag || u.claimed) continue;
    if (!u.ready) {  // still arriving: finish when it has
      u.claimed = receive;
      return request;
    }
    if (u.length > bytes) {
      request->fail(ErrorCode::invalid_argument,
                    truncation_message(rank(), peer_rank, tag, u.length, bytes));
      if (u.is_rts)
        queue_frame(peer.sendq,
                    {make_header(FrameType::reject, tag, 0, u.id), nullptr, 0, 0, nullptr, {}});
      if (u.self_send) u.self_send->complete();
    } else if (u.is_rts) {
      peer.rndv_recvs[u.id] = {receive, u.length};
      queue_frame(peer.sendq,
                  {make_header(FrameType::cts, tag, 0, u.id), nullptr, 0, 0, nullptr, {}});
    } else {
      deliver(receive, rank(), u.self_buf ? u.self_buf : u.data.data(), u.length);
      if (u.self_send) u.self_send->complete();
    }
    if (peer.rank != rank()) peer.unexpected_bytes -= unexpected_cost(u);
    peer.unexpected.erase(it);
    if (!peer.sendq.empty()) write_to(peer);
    resume_reading(peer);
    return request;
  }
  if (peer.dead || (!connected_ && peer_rank != rank())) {
    request->fail(ErrorCode::peer_failure,
                  fmt::format("rank {}: cannot receive from {}: {}", rank(), peer.where,
                              connected_ ? peer.dead_reason : "the transport is not connected"));
    return request;
  }
  peer.posted.push_back(receive);
  want_link(peer);  // a peer that died before ever sending is noticed this way
  return request;
}

// ---- failure ----------------------------------------------------------------

void TcpTransport::fail_peer(Peer& peer, const std::string& reason) {
  if (peer.dead) return;
  peer.dead = true;
  peer.dead_reason = reason;
  // A peer that leaves while nothing is pending with it is a job ending in
  // its own time, not a failure worth a warning.
  const bool pending = !peer.sendq.empty() || !peer.posted.empty() || !peer.rndv_sends.empty() ||
                       !peer.rndv_recvs.empty() || peer.in_payload;
  if (pending) {
    log::warn("tcp: rank {}: {}", rank(), reason);
  } else {
    log::info("tcp: rank {}: {} (nothing was pending with it)", rank(), reason);
  }
  close_link(peer);
  const std::string message = fmt::format("rank {}: {}", rank(), reason);
  auto fail = [&](const RequestPtr& r) {
    if (r) r->fail(ErrorCode::peer_failure, message);
  };
  for (auto& f : peer.sendq) fail(f.request);
  for (auto& r : peer.posted) fail(r.request);
  for (auto& u : peer.unexpected)
    if (u.claimed) fail(u.claimed->request);
  for (auto& [id, s] : peer.rndv_sends) fail(s.request);
  for (auto& [id, r] : peer.rndv_recvs) fail(r.receive.request);
  if (peer.in_payload && (peer.sink == Peer::Sink::posted || peer.sink == Peer::Sink::rendezvous))
    fail(peer.sink_receive.request);
  peer.sendq.clear();
  peer.posted.clear();
  // Messages that arrived whole before the connection ended stay receivable:
  // a peer that sent its last message and left (a job ending, one rank
  // finishing first) has delivered it. Partial ones and rendezvous
  // announcements (whose data never came) go.
  std::erase_if(peer.unexpected, [](const Unexpected& u) { return !u.ready || u.is_rts || u.claimed; });
  peer.unexpected_bytes = 0;
  for (const auto& u : peer.unexpected) peer.unexpected_bytes += unexpected_cost(u);
  peer.rndv_sends.clear();
  peer.rndv_recvs.clear();
  peer.in_payload = false;
  peer.sink = Peer::Sink::discard;
  peer.target = nullptr;
  peer.sink_unexpected = nullptr;
}

void TcpTransport::abort(const std::string& reason) {
  const std::string text = reason.substr(0, kMaxAbortReason);
  for (auto& p : peers_) {
    if (!p) continue;
    Peer& peer = *p;
    if (peer.rank == rank() || peer.dead || peer.link != Peer::Link::established) continue;
    // Best effort: tell the peer why, in one frame, before closing.
    FrameHeader h = make_header(FrameType::abort, 0, text.size(), 0);
    iovec iov[2] = {{&h, sizeof h}, {const_cast<char*>(text.data()), text.size()}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    [[maybe_unused]] auto n = ::sendmsg(peer.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  aborted_ = fmt::format("rank {} aborted: {}", rank(), reason);
  for (auto& p : peers_)
    if (p) fail_peer(*p, aborted_);
}

}  // namespace chorus::transport
