// The TCP transport's state per connection: what is queued to send, the
// receives posted for it, what arrived early, the rendezvous in flight and
// the reader's position in the current frame.
#pragma once

#include "transport/tcp/frames.hpp"
#include "transport/matching.hpp"
#include "transport/tcp/tcp_transport.hpp"

#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace chorus::transport {

inline constexpr std::size_t kStagingBytes = 256 * 1024;

// Bytes that are not zeroed when allocated: the kernel gives the pages
// when they are first written, so a link that carries only small messages
// costs a page or two of its 256 KiB, not all of it (and no memset: with
// about 20 lazy links per rank at start-up, zeroing was 40% of the CPU).
class StagingBuffer {
 public:
  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }
  std::byte* data() noexcept { return bytes_.get(); }
  void allocate(std::size_t size) {
    bytes_.reset(new std::byte[size]);  // default-initialized: not zeroed
    size_ = size;
  }

 private:
  std::unique_ptr<std::byte[]> bytes_;
  std::size_t size_ = 0;
};

struct OutFrame {
  tcp::FrameHeader header;
  const std::byte* payload = nullptr;
  std::size_t payload_bytes = 0;
  std::size_t written = 0;       // of header + payload
  RequestPtr request;            // completed once the whole frame is written
  std::vector<std::byte> owned;  // payloads the transport made (abort reasons)
};

// A message that arrived before its receive was posted.
struct Unexpected {
  Unexpected(Tag t, std::size_t n, bool rts = false, std::uint64_t rts_id = 0)
      : tag(t), length(n), is_rts(rts), id(rts_id) {}
  Tag tag;
  std::size_t length;
  bool is_rts;       // large: only announced; data still at the sender
  std::uint64_t id;  // the sender's id for CTS / REJECT
  std::vector<std::byte> data;
  bool ready = false;                    // eager data fully arrived
  std::optional<PostedReceive> claimed;  // a receive that matched while data arrives
  const std::byte* self_buf = nullptr;   // self-sends above the eager limit
  RequestPtr self_send;
};

// A large message's DATA goes in frames of at most this many bytes, so that
// a frame queued after it waits for one such frame, not the whole message
// (4 ms at 1 Gbit/s).
inline constexpr std::size_t kDataFrameBytes = 512 * 1024;

// Queues `frame` to send. DATA frames go last, in order; any other frame
// (a small message, a rendezvous announcement or answer, an abort) goes
// ahead of every DATA frame not yet begun, behind the other frames already
// there: no head-of-line blocking of small messages behind large ones, and
// the other frames keep their order. (A large message is matched by its
// announcement, which keeps its place, so receives match in posting order.)
void queue_frame(std::deque<OutFrame>& sendq, OutFrame frame);

// What an unexpected message costs the receiver until a receive takes it.
inline std::size_t unexpected_cost(const Unexpected& u) { return sizeof u + u.data.size(); }

struct TcpTransport::Peer {
  int rank = -1;
  std::string where;  // "rank 3 (10.0.0.7:41234)"
  // The link (links.cpp). `fd` is our outgoing socket while it connects and
  // awaits the acceptor's answer, and the link once established.
  enum class Link { none, connecting, await_reply, established } link = Link::none;
  net::Fd fd;
  int incoming_pending = 0;  // its connections to us still in their handshake
  tcp::Hello sent{};         // our Hello on the outgoing link
  std::size_t got = 0;
  std::byte received[sizeof(tcp::Hello)] = {};
  bool retrying = false;  // listed in retrying_, to open the link again at retry_at
  Clock::time_point retry_at{};
  Clock::time_point give_up_at{};  // opening the link: fail the peer after this
  bool dead = false;
  std::string dead_reason;
  std::uint32_t events = 0;  // what epoll watches for it (EPOLLIN, EPOLLOUT)

  std::deque<OutFrame> sendq;
  std::deque<PostedReceive> posted;
  std::list<Unexpected> unexpected;
  // What `unexpected` holds (entries and eager data). Over the transport's
  // limit, the connection is not read until receives take some: TCP's own
  // flow control then stops the sender (back-pressure, not failure).
  std::size_t unexpected_bytes = 0;
  bool reading_paused = false;
  bool said_paused = false;  // logged once per peer
  struct PendingSend {
    RequestPtr request;
    const std::byte* buf;
    std::size_t bytes;
  };
  std::unordered_map<std::uint64_t, PendingSend> rndv_sends;  // RTS sent, awaiting CTS
  struct PendingReceive {
    PostedReceive receive;
    std::size_t length;
    std::size_t received = 0;  // of its DATA frames' bytes so far
  };
  std::unordered_map<std::uint64_t, PendingReceive> rndv_recvs;  // CTS sent, awaiting DATA

  // Reading: bytes land in `staging`, or straight in a posted buffer. It is
  // allocated at the first read, so that ranks that never hear from most
  // peers do not pay kStagingBytes for each.
  StagingBuffer staging;
  std::size_t staged_begin = 0, staged_end = 0;
  bool in_payload = false;
  tcp::FrameHeader current{};
  enum class Sink { posted, unexpected, rendezvous, discard, abort_reason } sink = Sink::discard;
  std::byte* target = nullptr;
  std::size_t remaining = 0;
  PostedReceive sink_receive{};
  std::size_t sink_message_bytes = 0;  // rendezvous: the whole message, on its last DATA frame
  Unexpected* sink_unexpected = nullptr;
  std::string abort_reason;

  std::size_t staged() const { return staged_end - staged_begin; }
};

// A connection accepted and not yet proven (links.cpp).
struct TcpTransport::Incoming {
  net::Fd fd;
  std::string from;  // its address, for messages
  enum class Stage { hello, proof } stage = Stage::hello;
  int rank = -1;  // the rank it claims, once its Hello passed
  std::size_t got = 0;
  std::byte received[sizeof(tcp::Hello)] = {};
  tcp::Hello hello{};  // theirs
  tcp::Hello sent{};   // our answer
  Clock::time_point give_up_at{};
};

}  // namespace chorus::transport
