#include "transport/tcp/tcp_transport.hpp"
#include "common/config.hpp"

#include "common/logging.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <list>
#include <random>
#include <thread>

namespace chorus::transport {
namespace {

constexpr std::uint32_t kBlobMagic = 0x31544843;   // "CHT1"
constexpr std::uint32_t kHelloMagic = 0x48524843;  // "CHRH"
constexpr std::uint32_t kFrameMagic = 0x54524843;  // "CHRT"
constexpr std::uint8_t kVersion = 1;
constexpr std::size_t kStagingBytes = 256 * 1024;
constexpr std::size_t kMaxAbortReason = 1024;

enum class FrameType : std::uint8_t {
  eager = 1,
  rts = 2,
  cts = 3,
  data = 4,
  reject = 5,
  abort = 6
};

struct FrameHeader {
  std::uint32_t magic;
  std::uint8_t version;
  std::uint8_t type;
  std::uint16_t reserved;
  std::uint64_t tag;
  std::uint64_t length;
  std::uint64_t id;
};
static_assert(sizeof(FrameHeader) == 32);

struct Hello {
  std::uint32_t magic;
  std::uint8_t version;
  std::uint8_t reserved[3];
  std::uint64_t job;
  std::uint32_t from;
  std::uint32_t to;
};
static_assert(sizeof(Hello) == 24);

FrameHeader make_header(FrameType type, Tag tag, std::uint64_t length, std::uint64_t id) {
  return FrameHeader{kFrameMagic, kVersion, static_cast<std::uint8_t>(type), 0, tag, length, id};
}

// ---- address choice --------------------------------------------------------

bool interface_matches(const std::string& name, const std::string& spec) {
  if (spec.empty()) return true;
  bool exclude = false, exact = false;
  std::string list = spec;
  if (list.front() == '^') exclude = true, list.erase(0, 1);
  if (!list.empty() && list.front() == '=') exact = true, list.erase(0, 1);
  bool match = false;
  std::size_t start = 0;
  while (start <= list.size()) {
    const auto comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? comma : comma - start);
    if (!item.empty() && (exact ? name == item : name.rfind(item, 0) == 0)) match = true;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return exclude ? !match : match;
}

net::SocketAddress choose_local_address() {
  if (const char* addr = config::raw(config::Variable::socket_addr); addr && *addr)
    return net::resolve(addr, 0, "CHORUS_SOCKET_ADDR");
  const char* ifname_env = config::raw(config::Variable::socket_ifname);
  const std::string spec = ifname_env ? ifname_env : "";
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0)
    throw Error(ErrorCode::transport_error, "getifaddrs: " + net::errno_text(errno));
  std::optional<net::SocketAddress> best;
  int best_score = -1;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const std::string name = i->ifa_name;
    if (family == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr))
      continue;  // would need a scope id on every peer
    const bool loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    int score;
    if (!spec.empty()) {
      if (!interface_matches(name, spec)) continue;
      score = family == AF_INET ? 2 : 1;
    } else {
      const bool virtual_if = name.rfind("docker", 0) == 0 || name.rfind("veth", 0) == 0 ||
                              name.rfind("virbr", 0) == 0 || name.rfind("br-", 0) == 0;
      score = loopback ? 0 : virtual_if ? 1 : (family == AF_INET ? 3 : 2);
    }
    if (score > best_score) {
      net::SocketAddress a;
      a.length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      std::memcpy(&a.storage, i->ifa_addr, a.length);
      best = a, best_score = score;
    }
  }
  freeifaddrs(list);
  if (!best) {
    if (!spec.empty())
      throw Error(ErrorCode::invalid_argument,
                  "CHORUS_SOCKET_IFNAME='" + spec + "' matches no interface that is up");
    return net::resolve("127.0.0.1", 0, "loopback");
  }
  best->set_port(0);
  return *best;
}

int socket_buffer_bytes(int configured) {
  if (const char* env = config::raw(config::Variable::socket_buffer); env && *env) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (*end == '\0' && v >= 0 && v <= (1L << 30)) return static_cast<int>(v);
    log::warn("CHORUS_SOCKET_BUFFER='{}' is not a byte count; using {}", env, configured);
  }
  return configured;
}

void tune_socket(int fd, int buffer) {
  if (buffer > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
  }
}

std::uint64_t fnv1a(std::span<const AddressBlob> blobs) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& b : blobs) {
    for (std::byte x : b) h = (h ^ static_cast<std::uint8_t>(x)) * 1099511628211ull;
    h = (h ^ 0xFF) * 1099511628211ull;  // separates blobs
  }
  return h;
}

net::SocketAddress parse_blob(const AddressBlob& blob, int rank) {
  auto bad = [&](const char* why) {
    return Error(ErrorCode::invalid_argument,
                 fmt::format("TCP address of rank {} is unusable ({}); do all ranks use the tcp "
                             "transport and the same chorus version?",
                             rank, why));
  };
  if (blob.size() < 15) throw bad("too short");
  std::uint32_t magic;
  std::memcpy(&magic, blob.data(), 4);
  if (magic != kBlobMagic) throw bad("not a TCP address");
  const auto family = static_cast<std::uint8_t>(blob[12]);
  std::uint16_t port;
  std::memcpy(&port, blob.data() + 13, 2);
  net::SocketAddress a;
  if (family == 4 && blob.size() == 19) {
    auto* in = reinterpret_cast<sockaddr_in*>(&a.storage);
    in->sin_family = AF_INET;
    std::memcpy(&in->sin_addr, blob.data() + 15, 4);
    a.length = sizeof(sockaddr_in);
  } else if (family == 6 && blob.size() == 31) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    in6->sin6_family = AF_INET6;
    std::memcpy(&in6->sin6_addr, blob.data() + 15, 16);
    a.length = sizeof(sockaddr_in6);
  } else {
    throw bad("bad family or length");
  }
  a.set_port(port);
  return a;
}

// Why a handshake is not acceptable, or "" when it is.
std::string judge_hello(const Hello& h, std::uint64_t job, int expect_to, int size) {
  if (h.magic != kHelloMagic) return fmt::format("not a chorus peer (magic {:#010x})", h.magic);
  if (h.version != kVersion)
    return fmt::format("protocol version {} (this is {})", h.version, kVersion);
  if (h.job != job)
    return "belongs to another job (the two ranks hold different address lists: a stale or "
           "shared store, or a stray process)";
  if (static_cast<int>(h.to) != expect_to)
    return fmt::format("addressed to rank {}, this is rank {}", h.to, expect_to);
  if (static_cast<int>(h.from) >= size)
    return fmt::format("claims rank {} of a group of {}", h.from, size);
  return "";
}

}  // namespace

// ---- per-peer state -----------------------------------------------------------

struct PostedReceive {
  Tag tag;
  std::byte* buf;
  std::size_t capacity;
  RequestPtr request;
};

struct OutFrame {
  FrameHeader header;
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

struct TcpTransport::Peer {
  int rank = -1;
  std::string where;  // "rank 3 (10.0.0.7:41234)"
  net::Fd fd;
  bool dead = false;
  std::string dead_reason;
  bool writing = false;  // EPOLLOUT registered

  std::deque<OutFrame> sendq;
  std::deque<PostedReceive> posted;
  std::list<Unexpected> unexpected;
  struct PendingSend {
    RequestPtr request;
    const std::byte* buf;
    std::size_t bytes;
  };
  std::unordered_map<std::uint64_t, PendingSend> rndv_sends;  // RTS sent, awaiting CTS
  struct PendingReceive {
    PostedReceive receive;
    std::size_t length;
  };
  std::unordered_map<std::uint64_t, PendingReceive> rndv_recvs;  // CTS sent, awaiting DATA

  // Reading: bytes land in `staging`, or straight in a posted buffer.
  std::vector<std::byte> staging = std::vector<std::byte>(kStagingBytes);
  std::size_t staged_begin = 0, staged_end = 0;
  bool in_payload = false;
  FrameHeader current{};
  enum class Sink { posted, unexpected, rendezvous, discard, abort_reason } sink = Sink::discard;
  std::byte* target = nullptr;
  std::size_t remaining = 0;
  PostedReceive sink_receive{};
  Unexpected* sink_unexpected = nullptr;
  std::string abort_reason;

  std::size_t staged() const { return staged_end - staged_begin; }
};

// ---- construction and connection ----------------------------------------------

TcpTransport::TcpTransport(int rank, int size, Options options)
    : Transport(rank, size), options_(options) {
  options_.socket_buffer = socket_buffer_bytes(options_.socket_buffer);
  nonce_ = std::random_device{}() ^ (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^
           static_cast<std::uint64_t>(getpid());
  listen_address_ = choose_local_address();
  listener_ = net::listen_on(listen_address_, std::max(size, 16));
  net::set_nonblocking(listener_.get());
  tune_socket(listener_.get(), options_.socket_buffer);
  epoll_ = net::Fd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) throw Error(ErrorCode::transport_error, "epoll_create1: " + net::errno_text(errno));
  for (int r = 0; r < size; ++r) {
    peers_.push_back(std::make_unique<Peer>());
    peers_.back()->rank = r;
    peers_.back()->where = fmt::format("rank {}", r);
  }
  peers_[static_cast<std::size_t>(rank)]->staging.clear();  // self needs no socket buffers
  log::trace("tcp: rank {} listening on {}", rank, listen_address_.to_string());
}

TcpTransport::~TcpTransport() = default;

AddressBlob TcpTransport::address() {
  AddressBlob blob(15);
  std::memcpy(blob.data(), &kBlobMagic, 4);
  std::memcpy(blob.data() + 4, &nonce_, 8);
  const std::uint16_t port = listen_address_.port();
  std::memcpy(blob.data() + 13, &port, 2);
  if (listen_address_.family() == AF_INET6) {
    blob[12] = std::byte{6};
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&listen_address_.storage);
    const auto* p = reinterpret_cast<const std::byte*>(&in6->sin6_addr);
    blob.insert(blob.end(), p, p + 16);
  } else {
    blob[12] = std::byte{4};
    const auto* in = reinterpret_cast<const sockaddr_in*>(&listen_address_.storage);
    const auto* p = reinterpret_cast<const std::byte*>(&in->sin_addr);
    blob.insert(blob.end(), p, p + 4);
  }
  return blob;
}

void TcpTransport::connect(std::span<const AddressBlob> addresses, Deadline deadline) {
  if (addresses.size() != static_cast<std::size_t>(size()))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("tcp connect: {} addresses for {} ranks", addresses.size(), size()));
  std::vector<net::SocketAddress> where;
  for (int r = 0; r < size(); ++r)
    where.push_back(parse_blob(addresses[static_cast<std::size_t>(r)], r));
  job_id_ = fnv1a(addresses);
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
  auto hello_to = [&](int to) {
    return Hello{kHelloMagic,
                 kVersion,
                 {},
                 job_id_,
                 static_cast<std::uint32_t>(rank()),
                 static_cast<std::uint32_t>(to)};
  };

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
      const ssize_t n = ::recv(link.fd.get(), reinterpret_cast<char*>(&link.hello) + link.got,
                               sizeof(Hello) - link.got, 0);
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
        if (link.hello.magic == kHelloMagic && link.hello.version == kVersion &&
            link.hello.job != job_id_) {
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

// ---- posting ----------------------------------------------------------------

RequestPtr TcpTransport::isend(int peer_rank, Tag tag, const void* buf, std::size_t bytes) {
  check_message("isend", peer_rank, tag, buf, bytes);
  if (peer_rank == rank()) return self_send(tag, buf, bytes);
  auto request = std::make_shared<Request>(true, peer_rank, tag, bytes);
  Peer& peer = *peers_[static_cast<std::size_t>(peer_rank)];
  if (peer.dead || !connected_) {
    request->fail(ErrorCode::peer_failure,
                  fmt::format("rank {}: cannot send to {}: {}", rank(), peer.where,
                              connected_ ? peer.dead_reason : "the transport is not connected"));
    return request;
  }
  const auto* data = static_cast<const std::byte*>(buf);
  if (bytes <= options_.eager_limit) {
    peer.sendq.push_back(
        {make_header(FrameType::eager, tag, bytes, 0), data, bytes, 0, request, {}});
  } else {
    const std::uint64_t id = next_send_id_++;
    peer.rndv_sends[id] = {request, data, bytes};
    peer.sendq.push_back({make_header(FrameType::rts, tag, bytes, id), nullptr, 0, 0, nullptr, {}});
  }
  write_to(peer);
  return request;
}

RequestPtr TcpTransport::self_send(Tag tag, const void* buf, std::size_t bytes) {
  auto request = std::make_shared<Request>(true, rank(), tag, bytes);
  Peer& self = *peers_[static_cast<std::size_t>(rank())];
  const auto* data = static_cast<const std::byte*>(buf);
  for (auto it = self.posted.begin(); it != self.posted.end(); ++it) {
    if (it->tag != tag) continue;
    PostedReceive r = *it;
    self.posted.erase(it);
    if (bytes > r.capacity) {
      r.request->fail(ErrorCode::invalid_argument,
                      truncation_message(rank(), rank(), tag, bytes, r.capacity));
    } else {
      if (bytes) std::memcpy(r.buf, data, bytes);
      r.request->complete(bytes);
    }
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

RequestPtr TcpTransport::irecv(int peer_rank, Tag tag, void* buf, std::size_t bytes) {
  check_message("irecv", peer_rank, tag, buf, bytes);
  auto request = std::make_shared<Request>(false, peer_rank, tag, bytes);
  Peer& peer = *peers_[static_cast<std::size_t>(peer_rank)];
  PostedReceive receive{tag, static_cast<std::byte*>(buf), bytes, request};
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
        peer.sendq.push_back(
            {make_header(FrameType::reject, tag, 0, u.id), nullptr, 0, 0, nullptr, {}});
      if (u.self_send) u.self_send->complete();
    } else if (u.is_rts) {
      peer.rndv_recvs[u.id] = {receive, u.length};
      peer.sendq.push_back({make_header(FrameType::cts, tag, 0, u.id), nullptr, 0, 0, nullptr, {}});
    } else {
      if (u.length) std::memcpy(buf, u.self_buf ? u.self_buf : u.data.data(), u.length);
      if (u.self_send) u.self_send->complete();
      request->complete(u.length);
    }
    peer.unexpected.erase(it);
    if (!peer.sendq.empty()) write_to(peer);
    return request;
  }
  if (peer.dead || (!connected_ && peer_rank != rank())) {
    request->fail(ErrorCode::peer_failure,
                  fmt::format("rank {}: cannot receive from {}: {}", rank(), peer.where,
                              connected_ ? peer.dead_reason : "the transport is not connected"));
    return request;
  }
  peer.posted.push_back(receive);
  return request;
}

// ---- progress ---------------------------------------------------------------

bool TcpTransport::progress() { return handle_events(0); }

void TcpTransport::wait_for_activity(Deadline until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  handle_events(static_cast<int>(std::clamp<long>(left.count() + 1, 0, 1000)));
}

bool TcpTransport::handle_events(int timeout_ms) {
  if (!connected_) return false;
  epoll_event events[64];
  const int n = epoll_wait(epoll_.get(), events, 64, timeout_ms);
  bool moved = false;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t key = events[i].data.u64;
    if (key == ~std::uint64_t{0}) {
      accept_strays();
      continue;
    }
    if (key >= (std::uint64_t{1} << 32)) {  // a stray connection spoke: judge and refuse it
      const int fd = static_cast<int>(key & 0xFFFFFFFFu);
      Hello h{};
      const ssize_t got = ::recv(fd, &h, sizeof h, 0);
      std::string why = got <= 0 ? "closed before the handshake"
                        : got < static_cast<ssize_t>(sizeof h)
                            ? fmt::format("sent {} bytes instead of a handshake", got)
                            : judge_hello(h, job_id_, rank(), size());
      if (why.empty()) why = "all peers are already connected";
      log::warn("tcp: rank {} refused a connection: {}", rank(), why);
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
      std::erase_if(strays_, [fd](const net::Fd& s) { return s.get() == fd; });
      continue;
    }
    Peer& peer = *peers_[static_cast<std::size_t>(key)];
    if (peer.dead) continue;
    if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) moved |= read_from(peer);
    if (!peer.dead && (events[i].events & EPOLLOUT)) moved |= write_to(peer);
  }
  return moved || n > 0;
}

void TcpTransport::accept_strays() {
  while (true) {
    const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    if (strays_.size() >= 64) {  // a flood: refuse without listening
      log::warn("tcp: rank {} refused a connection: too many unidentified connections", rank());
      ::close(fd);
      continue;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = (std::uint64_t{1} << 32) | static_cast<std::uint32_t>(fd);
    epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
    strays_.emplace_back(fd);
  }
}

void TcpTransport::update_interest(Peer& peer) {
  const bool want = !peer.sendq.empty();
  if (want == peer.writing || peer.dead) return;
  epoll_event ev{};
  ev.events = want ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
  ev.data.u64 = static_cast<std::uint64_t>(peer.rank);
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, peer.fd.get(), &ev);
  peer.writing = want;
}

bool TcpTransport::write_to(Peer& peer) {
  bool moved = false;
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
  while (!peer.dead) {
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
      std::memcpy(&peer.current, peer.staging.data() + peer.staged_begin, sizeof(FrameHeader));
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

// The payload of the current frame is complete: deliver it.
void TcpTransport::on_payload(Peer& peer) {
  const FrameHeader& h = peer.current;
  const Peer::Sink sink = peer.sink;
  peer.in_payload = false;
  peer.sink = Peer::Sink::discard;
  peer.target = nullptr;
  switch (sink) {
    case Peer::Sink::posted:
    case Peer::Sink::rendezvous:
      peer.sink_receive.request->complete(h.length);
      break;
    case Peer::Sink::unexpected: {
      Unexpected* u = std::exchange(peer.sink_unexpected, nullptr);
      u->ready = true;
      if (u->claimed) {
        const PostedReceive r = *u->claimed;
        if (u->length > r.capacity) {
          r.request->fail(ErrorCode::invalid_argument,
                          truncation_message(rank(), peer.rank, u->tag, u->length, r.capacity));
        } else {
          if (u->length) std::memcpy(r.buf, u->data.data(), u->length);
          r.request->complete(u->length);
        }
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
  if (h.magic != kFrameMagic) return malformed(fmt::format("bad frame magic {:#010x}", h.magic));
  if (h.version != kVersion) return malformed(fmt::format("frame version {}", h.version));
  if (h.tag > kMaxTag) return malformed(fmt::format("tag {:#x} out of range", h.tag));
  auto start_payload = [&](Peer::Sink sink, std::byte* target) {
    peer.sink = sink;
    peer.target = target;
    peer.remaining = h.length;
    peer.in_payload = true;
  };
  switch (static_cast<FrameType>(h.type)) {
    case FrameType::eager: {
      if (h.length > options_.eager_limit)
        return malformed(fmt::format("eager frame of {} bytes", h.length));
      for (auto it = peer.posted.begin(); it != peer.posted.end(); ++it) {
        if (it->tag != h.tag) continue;
        peer.sink_receive = *it;
        peer.posted.erase(it);
        if (h.length > peer.sink_receive.capacity) {
          peer.sink_receive.request->fail(
              ErrorCode::invalid_argument,
              truncation_message(rank(), peer.rank, h.tag, h.length, peer.sink_receive.capacity));
          start_payload(Peer::Sink::discard, nullptr);
        } else {
          start_payload(Peer::Sink::posted, peer.sink_receive.buf);
        }
        break;
      }
      if (!peer.in_payload) {
        Unexpected u{h.tag, h.length};
        u.data.resize(h.length);
        peer.unexpected.push_back(std::move(u));
        peer.sink_unexpected = &peer.unexpected.back();
        start_payload(Peer::Sink::unexpected, peer.sink_unexpected->data.data());
      }
      break;
    }
    case FrameType::rts: {
      if (h.length <= options_.eager_limit)
        return malformed(fmt::format("rendezvous for only {} bytes", h.length));
      bool matched = false;
      for (auto it = peer.posted.begin(); it != peer.posted.end(); ++it) {
        if (it->tag != h.tag) continue;
        PostedReceive r = *it;
        peer.posted.erase(it);
        if (h.length > r.capacity) {
          r.request->fail(ErrorCode::invalid_argument,
                          truncation_message(rank(), peer.rank, h.tag, h.length, r.capacity));
          peer.sendq.push_back(
              {make_header(FrameType::reject, h.tag, 0, h.id), nullptr, 0, 0, nullptr, {}});
        } else {
          peer.rndv_recvs[h.id] = {r, h.length};
          peer.sendq.push_back(
              {make_header(FrameType::cts, h.tag, 0, h.id), nullptr, 0, 0, nullptr, {}});
        }
        matched = true;
        break;
      }
      if (!matched) {
        Unexpected u{h.tag, h.length, true, h.id};
        u.ready = true;
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
      peer.sendq.push_back(
          {make_header(FrameType::data, h.tag, s.bytes, h.id), s.buf, s.bytes, 0, s.request, {}});
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
      if (h.length != it->second.length)
        return malformed(fmt::format("data of {} bytes for a message announced as {}", h.length,
                                     it->second.length));
      peer.sink_receive = it->second.receive;
      peer.rndv_recvs.erase(it);
      start_payload(Peer::Sink::rendezvous, peer.sink_receive.buf);
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
  if (peer.fd) {
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, peer.fd.get(), nullptr);
    peer.fd.reset();
  }
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
    Peer& peer = *p;
    if (peer.rank == rank() || peer.dead || !peer.fd) continue;
    // Best effort: tell the peer why, in one frame, before closing.
    FrameHeader h = make_header(FrameType::abort, 0, text.size(), 0);
    iovec iov[2] = {{&h, sizeof h}, {const_cast<char*>(text.data()), text.size()}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    [[maybe_unused]] auto n = ::sendmsg(peer.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  for (auto& p : peers_) {
    Peer& peer = *p;
    fail_peer(peer, fmt::format("rank {} aborted: {}", rank(), reason));
  }
}

}  // namespace chorus::transport
