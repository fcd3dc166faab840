// The event loop: one epoll set over every connection (and the listener and
// links in their handshake, which are links.cpp's); writing queued frames with
// gathered sendmsg; reading into a staging buffer, or straight into a
// posted buffer once a payload's destination is known. What a complete
// header or payload means is protocol.cpp's.
#include "transport/tcp/peer.hpp"

#include "common/logging.hpp"

#include <fmt/format.h>

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace chorus::transport {

using namespace tcp;

bool TcpTransport::progress() { return handle_events(0); }

void TcpTransport::wait_for_activity(Deadline until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  handle_events(static_cast<int>(std::clamp<long>(left.count() + 1, 0, 1000)));
}

bool TcpTransport::handle_events(int timeout_ms) {
  if (!connected_) return false;
  timeout_ms = link_housekeeping(timeout_ms);
  epoll_event events[64];
  const int n = epoll_wait(epoll_.get(), events, 64, timeout_ms);
  bool moved = false;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t key = events[i].data.u64;
    if (on_link_key(key, events[i].events)) continue;  // the listener, or a link in its handshake
    Peer& peer = peer_at(static_cast<int>(key));
    if (peer.dead) continue;
    if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) moved |= read_from(peer);
    if (!peer.dead && (events[i].events & EPOLLOUT)) moved |= write_to(peer);
  }
  return moved || n > 0;
}

void TcpTransport::update_interest(Peer& peer) {
  const std::uint32_t want =
      (peer.reading_paused ? 0u : std::uint32_t{EPOLLIN}) | (peer.sendq.empty() ? 0u : std::uint32_t{EPOLLOUT});
  if (want == peer.events || peer.dead || peer.link != Peer::Link::established) return;
  epoll_event ev{};
  ev.events = want;  // EPOLLHUP and EPOLLERR are reported whatever is asked
  ev.data.u64 = static_cast<std::uint64_t>(peer.rank);
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, peer.fd.get(), &ev);
  peer.events = want;
}

void TcpTransport::pause_reading(Peer& peer) {
  peer.reading_paused = true;
  if (!peer.said_paused)
    log::warn("tcp: rank {} stops reading from {} for now: it has sent {} bytes of messages no "
              "receive has asked for yet (CHORUS_SOCKET_UNEXPECTED_BYTES = {}); reading resumes "
              "as receives take them",
              rank(), peer.where, peer.unexpected_bytes, max_unexpected_);
  peer.said_paused = true;
  update_interest(peer);
}

bool TcpTransport::resume_reading(Peer& peer) {
  if (!peer.reading_paused || peer.unexpected_bytes > max_unexpected_ / 2) return false;
  peer.reading_paused = false;
  update_interest(peer);
  return read_from(peer);  // what is staged already: epoll will not report it
}

void queue_frame(std::deque<OutFrame>& sendq, OutFrame frame) {
  if (frame.header.type == static_cast<std::uint8_t>(FrameType::data)) {
    sendq.push_back(std::move(frame));
    return;
  }
  auto it = sendq.begin();
  if (it != sendq.end() && it->written > 0) ++it;  // being written: it stays first
  it = std::find_if(it, sendq.end(), [](const OutFrame& f) {
    return f.header.type == static_cast<std::uint8_t>(FrameType::data);
  });
  sendq.insert(it, std::move(frame));
}

bool TcpTransport::write_to(Peer& peer) {
  bool moved = false;
  if (peer.link != Peer::Link::established) return false;  // queued until it is
  while (!peer.sendq.empty() && !peer.dead) {
    // Gather up to 32 frames (64 pieces) into one sendmsg.
    iovec iov[64];
    int count = 0;
    for (auto it = peer.sendq.begin(); it != peer.sendq.end() && count < 63; ++it) {
      OutFrame& f = *it;
      std::size_t skip = f.written;
      if (skip < sizeof(FrameHeader)) {
        iov[count++] = {reinterpret_cast<char*>(&f.header) + skip, sizeof(FrameHeader) - skip};
        skip = 0;
      } else {
        skip -= sizeof(FrameHeader);
      }
      const std::byte* payload = f.owned.empty() ? f.payload : f.owned.data();
      if (f.payload_bytes > skip)
        iov[count++] = {const_cast<std::byte*>(payload) + skip, f.payload_bytes - skip};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(count);
    const ssize_t n = ::sendmsg(peer.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      const int send_errno = errno;
      // A peer that aborted wrote why before it closed: read that first, so
      // that the error names the cause rather than the broken pipe.
      if (send_errno == EPIPE || send_errno == ECONNRESET) read_from(peer);
      fail_peer(peer, fmt::format("sending to {} failed: {}", peer.where, net::errno_text(send_errno)));
      return true;
    }
    moved = true;
    auto left = static_cast<std::size_t>(n);
    while (left > 0 ||
           (!peer.sendq.empty() &&
            peer.sendq.front().written == sizeof(FrameHeader) + peer.sendq.front().payload_bytes)) {
      OutFrame& f = peer.sendq.front();
      const std::size_t total = sizeof(FrameHeader) + f.payload_bytes;
      const std::size_t take = std::min(left, total - f.written);
      f.written += take;
      left -= take;
      if (f.written < total) break;
      if (f.request) f.request->complete();
      peer.sendq.pop_front();
    }
  }
  update_interest(peer);
  return moved;
}

// After a recv that returned `n` <= 0: true (and the peer failed) unless it
// was only "nothing to read yet".
bool TcpTransport::read_failed(Peer& peer, long n) {
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
  fail_peer(peer, n == 0 ? fmt::format("{} closed the connection", peer.where)
                         : fmt::format("receiving from {} failed: {}", peer.where,
                                       net::errno_text(errno)));
  return true;
}

bool TcpTransport::read_from(Peer& peer) {
  bool moved = false;
  // A short read means the socket was empty: asking again would only cost a
  // system call that says EAGAIN. epoll reports the socket again when more
  // arrives (level-triggered).
  bool drained = false;
  if (peer.link != Peer::Link::established) return false;
  if (peer.staging.empty()) peer.staging.allocate(kStagingBytes);
  while (!peer.dead) {
    if (!peer.in_payload && peer.unexpected_bytes > max_unexpected_) {
      pause_reading(peer);
      return moved;
    }
    if (peer.in_payload) {
      // Take what is staged first, then read the rest straight into place.
      const std::size_t from_staging = std::min(peer.remaining, peer.staged());
      if (from_staging > 0) {
        if (peer.target) {
          std::memcpy(peer.target, peer.staging.data() + peer.staged_begin, from_staging);
          peer.target += from_staging;
        }
        peer.staged_begin += from_staging;
        peer.remaining -= from_staging;
      }
      if (peer.remaining > 0 && peer.target && peer.remaining >= kStagingBytes / 2) {
        if (drained) return moved;
        const ssize_t n = ::recv(peer.fd.get(), peer.target, peer.remaining, MSG_DONTWAIT);
        if (n > 0) {
          drained = static_cast<std::size_t>(n) < peer.remaining;
          peer.target += n;
          peer.remaining -= static_cast<std::size_t>(n);
          moved = true;
          continue;
        }
        if (read_failed(peer, n)) return true;
        return moved;
      }
      if (peer.remaining == 0) {
        on_payload(peer);
        moved = true;
        continue;
      }
    } else if (peer.staged() >= sizeof(FrameHeader)) {
      peer.current =
          decode_header(std::span(peer.staging.data() + peer.staged_begin, peer.staged()));
      peer.staged_begin += sizeof(FrameHeader);
      on_header(peer);
      moved = true;
      continue;
    }
    // Need more bytes in staging.
    if (drained) return moved;
    if (peer.staged_begin > 0) {
      std::memmove(peer.staging.data(), peer.staging.data() + peer.staged_begin, peer.staged());
      peer.staged_end -= peer.staged_begin;
      peer.staged_begin = 0;
    }
    const std::size_t space = peer.staging.size() - peer.staged_end;
    const ssize_t n =
        ::recv(peer.fd.get(), peer.staging.data() + peer.staged_end, space, MSG_DONTWAIT);
    if (n > 0) {
      drained = static_cast<std::size_t>(n) < space;
      peer.staged_end += static_cast<std::size_t>(n);
      moved = true;
      continue;
    }
    if (read_failed(peer, n)) return true;
    return moved;
  }
  return moved;
}

}  // namespace chorus::transport
