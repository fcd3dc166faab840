// The protocol, receiving side: what a frame header asks for (an eager
// message into a posted receive or the unexpected list, a rendezvous
// announcement answered with CTS or REJECT, CTS starting a DATA frame,
// DATA into the receive it was cleared for, a peer's abort reason), and
// delivering a payload once it is complete. Every header is checked before
// any of it is used; a bad one fails that peer only.
#include "transport/tcp/peer.hpp"

#include <fmt/format.h>

#include <cstring>

namespace chorus::transport {

using namespace tcp;

// The payload of the current frame is complete: deliver it.
void TcpTransport::on_payload(Peer& peer) {
  const FrameHeader& h = peer.current;
  const Peer::Sink sink = peer.sink;
  peer.in_payload = false;
  peer.sink = Peer::Sink::discard;
  peer.target = nullptr;
  switch (sink) {
    case Peer::Sink::posted:
      peer.sink_receive.request->complete(h.length);
      break;
    case Peer::Sink::rendezvous:  // complete with its last DATA frame
      if (peer.sink_message_bytes > 0) peer.sink_receive.request->complete(peer.sink_message_bytes);
      break;
    case Peer::Sink::unexpected: {
      Unexpected* u = std::exchange(peer.sink_unexpected, nullptr);
      u->ready = true;
      if (u->claimed) {
        deliver(*u->claimed, rank(), u->data.data(), u->length);
        peer.unexpected_bytes -= unexpected_cost(*u);
        peer.unexpected.remove_if([&](const Unexpected& x) { return &x == u; });
      }
      break;
    }
    case Peer::Sink::abort_reason:
      fail_peer(peer, fmt::format("{} aborted: {}", peer.where, peer.abort_reason));
      break;
    case Peer::Sink::discard:
      break;
  }
}

// A frame header has arrived: check it before using any of it, then act.
void TcpTransport::on_header(Peer& peer) {
  const FrameHeader& h = peer.current;
  auto malformed = [&](const std::string& why) {
    fail_peer(peer, fmt::format("{} broke the protocol ({}); connection closed", peer.where, why));
  };
  if (const std::string why = check_header(h); !why.empty()) return malformed(why);
  auto start_payload = [&](Peer::Sink sink, std::byte* target) {
    peer.sink = sink;
    peer.target = target;
    peer.remaining = h.length;
    peer.in_payload = true;
  };
  const auto same_tag = [&](const PostedReceive& r) { return r.tag == h.tag; };
  switch (static_cast<FrameType>(h.type)) {
    case FrameType::eager: {
      if (h.length > options_.eager_limit)
        return malformed(fmt::format("eager frame of {} bytes", h.length));
      if (auto receive = take_first(peer.posted, same_tag)) {
        peer.sink_receive = *receive;
        if (h.length > receive->capacity) {
          receive->request->fail(
              ErrorCode::invalid_argument,
              truncation_message(rank(), peer.rank, h.tag, h.length, receive->capacity));
          start_payload(Peer::Sink::discard, nullptr);
        } else {
          start_payload(Peer::Sink::posted, receive->buf);
        }
      } else {
        Unexpected u{h.tag, h.length};
        u.data.resize(h.length);
        peer.unexpected_bytes += unexpected_cost(u);
        peer.unexpected.push_back(std::move(u));
        peer.sink_unexpected = &peer.unexpected.back();
        start_payload(Peer::Sink::unexpected, peer.sink_unexpected->data.data());
      }
      break;
    }
    case FrameType::rts: {
      if (h.length <= options_.eager_limit)
        return malformed(fmt::format("rendezvous for only {} bytes", h.length));
      if (auto receive = take_first(peer.posted, same_tag)) {
        if (h.length > receive->capacity) {
          receive->request->fail(
              ErrorCode::invalid_argument,
              truncation_message(rank(), peer.rank, h.tag, h.length, receive->capacity));
          queue_frame(peer.sendq,
                      {make_header(FrameType::reject, h.tag, 0, h.id), nullptr, 0, 0, nullptr, {}});
        } else {
          peer.rndv_recvs[h.id] = {*receive, h.length};
          queue_frame(peer.sendq,
                      {make_header(FrameType::cts, h.tag, 0, h.id), nullptr, 0, 0, nullptr, {}});
        }
      } else {
        Unexpected u{h.tag, h.length, true, h.id};
        u.ready = true;
        peer.unexpected_bytes += unexpected_cost(u);
        peer.unexpected.push_back(std::move(u));
      }
      write_to(peer);
      break;
    }
    case FrameType::cts: {
      auto it = peer.rndv_sends.find(h.id);
      if (it == peer.rndv_sends.end()) return malformed("clear-to-send for an unknown message");
      auto s = it->second;
      peer.rndv_sends.erase(it);
      for (std::size_t at = 0; at < s.bytes; at += kDataFrameBytes) {
        const std::size_t bytes = std::min(kDataFrameBytes, s.bytes - at);
        const bool last = at + bytes == s.bytes;  // the request completes with it
        queue_frame(peer.sendq, {make_header(FrameType::data, h.tag, bytes, h.id), s.buf + at,
                                 bytes, 0, last ? s.request : nullptr, {}});
      }
      write_to(peer);
      break;
    }
    case FrameType::reject: {
      auto it = peer.rndv_sends.find(h.id);
      if (it == peer.rndv_sends.end()) return malformed("reject for an unknown message");
      it->second.request->complete();  // the receiver reported the error on its side
      peer.rndv_sends.erase(it);
      break;
    }
    case FrameType::data: {
      auto it = peer.rndv_recvs.find(h.id);
      if (it == peer.rndv_recvs.end()) return malformed("data for an unknown message");
      auto& pending = it->second;
      if (h.length == 0 || h.length > pending.length - pending.received)
        return malformed(fmt::format("data of {} bytes where {} of a {}-byte message remain",
                                     h.length, pending.length - pending.received, pending.length));
      peer.sink_receive = pending.receive;
      std::byte* at = pending.receive.buf + pending.received;
      pending.received += h.length;
      peer.sink_message_bytes = 0;
      if (pending.received == pending.length) {  // the last frame of it
        peer.sink_message_bytes = pending.length;
        peer.rndv_recvs.erase(it);
      }
      start_payload(Peer::Sink::rendezvous, at);
      break;
    }
    case FrameType::abort: {
      if (h.length > kMaxAbortReason) return malformed("abort reason too long");
      peer.abort_reason.assign(h.length, '\0');
      start_payload(Peer::Sink::abort_reason,
                    reinterpret_cast<std::byte*>(peer.abort_reason.data()));
      break;
    }
    default:
      return malformed(fmt::format("unknown frame type {}", h.type));
  }
  if (peer.in_payload && peer.remaining == 0) on_payload(peer);  // zero bytes: deliver now
}

}  // namespace chorus::transport
