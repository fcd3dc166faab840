#include "bootstrap/tcp_store.hpp"

#include "common/config.hpp"
#include "common/logging.hpp"
#include "common/wire.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <list>
#include <new>
#include <thread>
#include <unordered_map>

namespace chorus::bootstrap {
namespace {

constexpr std::uint32_t kMagic = 0x54534843;       // "CHST": a request
constexpr std::uint32_t kHelloMagic = 0x48534843;  // "CHSH": the handshake
constexpr std::uint8_t kProtocol = 3;  // 3: PARK
constexpr std::uint32_t kMaxMessage = 1u << 30;    // a u32 length never wraps below this
constexpr std::size_t kMaxKey = 4096;
constexpr std::size_t kMaxJob = 256;
constexpr std::size_t kMaxGetRequest = 64u << 20;  // the keys of one GET
// An unauthenticated connection must finish its handshake within this.
constexpr auto kHelloTime = std::chrono::seconds(10);

enum class Op : std::uint8_t { set = 1, get = 2, add = 3, park = 4 };
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

std::span<const std::byte> span_of(const auth::Nonce& n) { return n; }

auth::Digest digest_from(const std::vector<std::byte>& bytes, const std::string& what) {
  auth::Digest d{};
  if (bytes.size() != d.size())
    throw Error(ErrorCode::peer_failure, fmt::format("{}: a proof of {} bytes", what, bytes.size()));
  std::copy(bytes.begin(), bytes.end(), d.begin());
  return d;
}

// What the client proves, and what the server proves back.
auth::Digest client_proof(const auth::Secret& s, const auth::Nonce& server, const auth::Nonce& client,
                          const std::string& job) {
  return s.mac("chorus store client", {span_of(server), span_of(client), auth::bytes_of(job)});
}
auth::Digest server_proof(const auth::Secret& s, const auth::Nonce& server, const auth::Nonce& client,
                          const std::string& job) {
  return s.mac("chorus store server", {span_of(client), span_of(server), auth::bytes_of(job)});
}

struct Limits {
  std::size_t max_value;
  std::size_t max_bytes;
  std::size_t max_clients;
  // A reply holds at most four values' worth (the addresses of thousands
  // of ranks fit many times over); asking for one key many times is no way
  // to make the server build gigabytes.
  std::size_t max_reply() const {
    return std::min({4 * max_value, max_bytes, std::size_t{kMaxMessage} - 64});
  }
  static Limits from_env() {
    using config::Variable;
    return {config::byte_count(Variable::store_max_value, 16u << 20, 64, std::size_t{1} << 30),
            config::byte_count(Variable::store_max_bytes, std::size_t{1} << 30, 4096,
                               std::size_t{1} << 40),
            config::byte_count(Variable::store_max_clients, 16384, 1, 1 << 20)};
  }
};

// A store server may need a descriptor per rank: lift the soft limit to the
// hard one (1024 is a common soft limit, and jobs have more ranks).
void raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

StoreAccess StoreAccess::from_env() { return {auth::Secret::from_env(), job_name_from_env()}; }

std::string job_name_from_env() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  if (auto job = config::get(config::Variable::job_id)) return *job;
  if (auto run = env("TORCHELASTIC_RUN_ID"); !run.empty()) return "torchrun:" + run;
  if (auto job = env("SLURM_JOB_ID"); !job.empty())
    return fmt::format("slurm:{}.{}", job, env("SLURM_STEP_ID"));
  if (auto ns = env("PMIX_NAMESPACE"); !ns.empty()) return "pmix:" + ns;
  return "";
}

// ---- server -----------------------------------------------------------------

struct StoreServer::State {
  struct Namespace;
  struct Client;
  struct Waiter {  // a GET whose keys are not all set yet
    Client* client;
    std::vector<std::string> keys;
    std::size_t missing;
    Clock::time_point deadline;
  };
  struct Client {
    net::Fd fd;
    std::string peer;
    std::vector<std::byte> in;
    std::vector<std::byte> out;
    auth::Nonce nonce{};
    bool admitted = false;  // handshake done
    bool closing = false;   // refused: close once `out` has left
    bool parked = false;    // only looks up now and then: a draining server does not wait for it
    Clock::time_point hello_deadline;
    Namespace* space = nullptr;
    std::unique_ptr<Waiter> waiter;  // at most one request in progress
  };
  struct Namespace {
    std::string job;
    std::unordered_map<std::string, Bytes> values;
    std::unordered_map<std::string, std::vector<Waiter*>> waiting;  // by missing key
    std::size_t clients = 0;
    std::size_t bytes = 0;
  };

  Limits limits = Limits::from_env();
  std::list<Client> clients;
  std::unordered_map<std::string, Namespace> spaces;
  std::size_t bytes = 0;  // of every namespace
};

StoreServer::StoreServer(const std::string& host, std::uint16_t port,
                         std::optional<auth::Secret> secret)
    : StoreServer(host, net::resolve(host, port, "store server"), net::Fd(), std::move(secret)) {}

std::unique_ptr<StoreServer> StoreServer::serve_if_free(const std::string& host, std::uint16_t port,
                                                        std::optional<auth::Secret> secret) {
  net::SocketAddress address = net::resolve(host, port, "store server");
  int error = 0;
  net::Fd listener = net::try_listen_on(address, 1024, error);
  if (!listener && error == EADDRINUSE) return nullptr;
  if (!listener)
    throw Error(ErrorCode::transport_error,
                fmt::format("store server: cannot listen on {}: {}", address.to_string(),
                            net::errno_text(error)));
  return std::unique_ptr<StoreServer>(
      new StoreServer(host, address, std::move(listener), std::move(secret)));
}

StoreServer::StoreServer(const std::string& host, net::SocketAddress address, net::Fd listener,
                         std::optional<auth::Secret> secret)
    : address_(address),
      host_(host),
      secret_(std::move(secret)),
      listener_(std::move(listener)),
      state_(std::make_unique<State>()) {
  raise_descriptor_limit();
  if (!listener_) listener_ = net::listen_on(address_, 1024);
  net::set_nonblocking(listener_.get());
  wake_ = net::Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) throw Error(ErrorCode::internal, "eventfd: " + net::errno_text(errno));
  if (!secret_) auth::note_unauthenticated("the store server at " + url());
  thread_ = std::thread([this] { serve(); });
  log::info("store server listening on {}{}", url(), secret_ ? " (job secret required)" : "");
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
  using Client = State::Client;
  using Waiter = State::Waiter;
  auto send = [](Client& c, wire::Writer& w) {
    auto f = frame(w.bytes());
    c.out.insert(c.out.end(), f.begin(), f.end());
  };
  auto send_error = [&](Client& c, const std::string& why) {
    wire::Writer w;
    w.put(static_cast<std::uint8_t>(Status::error)).put_string(why);
    send(c, w);
  };
  // A refusal before or during the handshake: say why, then close.
  auto refuse = [&](Client& c, const std::string& why) {
    log::warn("store server: refusing {}: {}", c.peer, why);
    wire::Writer w;
    w.put(kHelloMagic).put(kProtocol).put(static_cast<std::uint8_t>(Status::error)).put_string(why);
    send(c, w);
    c.closing = true;
  };
  auto reply_get = [&](Client& c, const std::vector<std::string>& keys) {
    const auto& values = c.space->values;
    std::size_t total = 0;
    for (const auto& k : keys) total += 4 + values.at(k).size();
    if (total > s.limits.max_reply())
      return send_error(c, fmt::format("the reply would be {} bytes, over the store's limit of {} "
                                       "(4 x CHORUS_STORE_MAX_VALUE)",
                                       total, s.limits.max_reply()));
    wire::Writer w;
    w.put(static_cast<std::uint8_t>(Status::ok)).put(static_cast<std::uint32_t>(keys.size()));
    for (const auto& k : keys) w.put_bytes(values.at(k));
    send(c, w);
  };
  auto forget_waiter = [&](Client& c) {  // unregisters and deletes c's waiter
    if (!c.waiter) return;
    auto& waiting = c.space->waiting;
    for (const auto& k : c.waiter->keys) {
      auto it = waiting.find(k);
      if (it == waiting.end()) continue;
      std::erase(it->second, c.waiter.get());
      if (it->second.empty()) waiting.erase(it);
    }
    c.waiter.reset();
  };
  // A key appeared: O(the GETs waiting for it).
  auto on_new_key = [&](State::Namespace& space, const std::string& key) {
    auto it = space.waiting.find(key);
    if (it == space.waiting.end()) return;
    std::vector<Waiter*> waiters = std::move(it->second);
    space.waiting.erase(it);
    for (Waiter* w : waiters) {
      if (--w->missing > 0) continue;
      Client& c = *w->client;
      reply_get(c, w->keys);
      c.waiter.reset();
    }
  };
  auto store_value = [&](State::Namespace& space, const std::string& key, Bytes value) {
    auto [it, fresh] = space.values.try_emplace(key);
    const std::size_t old = fresh ? 0 : key.size() + it->second.size();
    const std::size_t now = key.size() + value.size();
    if (s.bytes - old + now > s.limits.max_bytes) {
      if (fresh) space.values.erase(it);
      return fmt::format("the store holds {} bytes and may hold {} (CHORUS_STORE_MAX_BYTES)",
                         s.bytes, s.limits.max_bytes);
    }
    s.bytes = s.bytes - old + now, space.bytes = space.bytes - old + now;
    it->second = std::move(value);
    if (fresh) on_new_key(space, key);
    return std::string();
  };

  auto handle_hello = [&](Client& c, std::span<const std::byte> body) {
    wire::Reader r(body, "store handshake from " + c.peer);
    if (r.get<std::uint32_t>() != kHelloMagic)
      throw Error(ErrorCode::peer_failure, "not a Chorus store client (bad handshake magic)");
    if (const auto version = r.get<std::uint8_t>(); version != kProtocol)
      return refuse(c, fmt::format("store protocol {}, this server speaks {}", version, kProtocol));
    const bool proves = r.get<std::uint8_t>() != 0;
    const auto nonce_bytes = r.get_bytes();
    const auto proof_bytes = r.get_bytes();
    const std::string job = r.get_string();
    if (!r.at_end()) throw Error(ErrorCode::peer_failure, "trailing bytes in the handshake");
    if (job.size() > kMaxJob)
      return refuse(c, fmt::format("a job name of {} bytes (at most {})", job.size(), kMaxJob));
    auth::Nonce client_nonce{};
    if (nonce_bytes.size() != client_nonce.size())
      throw Error(ErrorCode::peer_failure, "a handshake nonce of the wrong size");
    std::copy(nonce_bytes.begin(), nonce_bytes.end(), client_nonce.begin());
    auth::Digest answer{};
    if (secret_) {
      if (!proves)
        return refuse(c, "this store requires the job secret, and the client has none (set "
                         "CHORUS_SECRET or CHORUS_SECRET_FILE as the job's other ranks do)");
      if (!auth::same(digest_from(proof_bytes, "store handshake"),
                      client_proof(*secret_, c.nonce, client_nonce, job)))
        return refuse(c, "wrong job secret");
      answer = server_proof(*secret_, c.nonce, client_nonce, job);
    } else if (proves) {
      return refuse(c, "this store has no job secret, and the client has one: it would not "
                       "trust this store (serve it with the job's CHORUS_SECRET)");
    }
    auto& space = s.spaces[job];
    space.job = job;
    ++space.clients;
    c.space = &space;
    c.admitted = true;
    wire::Writer w;
    w.put(kHelloMagic).put(kProtocol).put(static_cast<std::uint8_t>(Status::ok)).put_bytes(answer);
    send(c, w);
  };

  // Handles one request; throws chorus::Error when the client sent garbage.
  auto handle = [&](Client& c, std::span<const std::byte> body) {
    if (!c.admitted) return handle_hello(c, body);
    State::Namespace& space = *c.space;
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
    auto finish = [&] {
      if (!r.at_end()) throw Error(ErrorCode::peer_failure, "store request: trailing bytes");
    };
    switch (op) {
      case Op::set: {
        std::string key = key_of();
        Bytes value = r.get_bytes();
        finish();
        if (value.size() > s.limits.max_value)
          return send_error(c, fmt::format("set({}): a value of {} bytes, over the store's limit "
                                           "of {} (CHORUS_STORE_MAX_VALUE)",
                                           key, value.size(), s.limits.max_value));
        // Chorus sets each key once. A second, different value means two
        // jobs share this store under one job name.
        if (auto it = space.values.find(key); it != space.values.end() && it->second != value)
          return send_error(c, fmt::format("set({}): the key already holds another value: two "
                                           "jobs share this store under one job name '{}' (give "
                                           "each its own CHORUS_JOB_ID, or its own store)",
                                           key, space.job));
        if (auto why = store_value(space, key, std::move(value)); !why.empty())
          return send_error(c, "set(" + key + "): " + why);
        wire::Writer w;
        w.put(static_cast<std::uint8_t>(Status::ok));
        return send(c, w);
      }
      case Op::add: {
        std::string key = key_of();
        const auto delta = r.get<std::int64_t>();
        finish();
        std::int64_t value = 0;
        if (auto it = space.values.find(key); it != space.values.end()) {
          if (it->second.size() != sizeof value)
            return send_error(c, fmt::format("add({}): the key holds {} bytes, not a counter", key,
                                             it->second.size()));
          std::memcpy(&value, it->second.data(), sizeof value);
        }
        if (__builtin_add_overflow(value, delta, &value))
          return send_error(c, fmt::format("add({}, {}): the counter would overflow", key, delta));
        Bytes stored(sizeof value);
        std::memcpy(stored.data(), &value, sizeof value);
        if (auto why = store_value(space, key, std::move(stored)); !why.empty())
          return send_error(c, "add(" + key + "): " + why);
        wire::Writer w;
        w.put(static_cast<std::uint8_t>(Status::ok)).put(value);
        return send(c, w);
      }
      case Op::get: {
        if (body.size() > kMaxGetRequest)
          throw Error(ErrorCode::peer_failure,
                      fmt::format("a GET of {} bytes (at most {})", body.size(), kMaxGetRequest));
        const auto timeout_ms = r.get<std::uint32_t>();
        const auto n = r.get<std::uint32_t>();
        if (n > 1u << 20) throw Error(ErrorCode::peer_failure, "store request: too many keys");
        auto waiter = std::make_unique<Waiter>(
            Waiter{&c, {}, 0, Clock::now() + std::chrono::milliseconds(timeout_ms)});
        for (std::uint32_t i = 0; i < n; ++i) waiter->keys.push_back(key_of());
        finish();
        for (const auto& k : waiter->keys) {
          if (space.values.count(k)) continue;
          ++waiter->missing;
          space.waiting[k].push_back(waiter.get());
        }
        if (waiter->missing == 0) return reply_get(c, waiter->keys);
        c.waiter = std::move(waiter);
        return;
      }
      case Op::park: {
        finish();
        c.parked = true;
        wire::Writer w;
        w.put(static_cast<std::uint8_t>(Status::ok));
        return send(c, w);
      }
    }
    throw Error(ErrorCode::peer_failure, fmt::format("store request from {}: unknown op {}",
                                                     c.peer, static_cast<int>(op)));
  };
  auto drop = [&](std::list<Client>::iterator it) {
    Client& c = *it;
    forget_waiter(c);
    if (c.space && --c.space->clients == 0) {
      // The job's last client left: its keys go, so that a later job under
      // the same name starts clean.
      s.bytes -= c.space->bytes;
      const std::string job = c.space->job;
      s.spaces.erase(job);
    }
    return s.clients.erase(it);
  };
  auto time_out = [&](Client& c) {
    Waiter& w = *c.waiter;
    wire::Writer out;
    std::vector<const std::string*> missing;
    for (const auto& k : w.keys)
      if (!c.space->values.count(k)) missing.push_back(&k);
    out.put(static_cast<std::uint8_t>(Status::timeout))
        .put(static_cast<std::uint32_t>(missing.size()));
    for (const auto* k : missing) out.put_string(*k);
    send(c, out);
    forget_waiter(c);
  };

  // Once told to stop, the server drains: it accepts no one new but keeps
  // answering the clients it has until they leave, for at most kDrain. Rank 0
  // serving the store may finish first; the others' last replies (a barrier,
  // say) must still reach them.
  constexpr auto kDrain = std::chrono::seconds(10);
  bool draining = false;
  Clock::time_point drain_until{};
  Clock::time_point accept_paused_until{}, said_cannot_accept{};
  bool said_full = false;
  std::vector<pollfd> fds;
  while (true) {
    if (draining && (Clock::now() >= drain_until ||
                     std::all_of(s.clients.begin(), s.clients.end(),
                                 [](const State::Client& c) {
                                   return c.parked && !c.waiter && c.out.empty();
                                 })))
      return;
    // Expire waiters and unfinished handshakes: O(clients) per pass.
    const auto now = Clock::now();
    int timeout = 1000;
    for (auto& c : s.clients) {
      if (c.waiter) {
        if (now >= c.waiter->deadline)
          time_out(c);
        else
          timeout = std::min(timeout, remaining_ms(c.waiter->deadline) + 1);
      }
      if (!c.admitted && !c.closing) {
        if (now >= c.hello_deadline)
          refuse(c, "no handshake in time");
        else
          timeout = std::min(timeout, remaining_ms(c.hello_deadline) + 1);
      }
    }

    if (draining) timeout = std::min(timeout, 100);
    const bool accepting = !draining && now >= accept_paused_until;
    if (!accepting && !draining) timeout = std::min(timeout, 100);
    fds.clear();
    fds.push_back({wake_.get(), static_cast<short>(draining ? 0 : POLLIN), 0});
    fds.push_back({listener_.get(), static_cast<short>(accepting ? POLLIN : 0), 0});
    for (auto& c : s.clients) {
      // Back-pressure: a client's next request is read only once its last
      // reply has left and it waits for nothing.
      const bool reading = !c.closing && c.out.empty() && !c.waiter;
      if (reading && c.in.size() >= 4) {  // a request already here: no sleeping
        std::uint32_t length;
        std::memcpy(&length, c.in.data(), 4);
        if (c.in.size() >= 4 + std::size_t{length}) timeout = 0;
      }
      fds.push_back({c.fd.get(),
                     static_cast<short>((reading ? POLLIN : 0) | (c.out.empty() ? 0 : POLLOUT)),
                     0});
    }
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
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            // Out of descriptors: the listener stays readable, so polling it
            // again at once would spin. Pause accepting for a moment (and
            // say so every few seconds, not at every pause).
            if (Clock::now() - said_cannot_accept > std::chrono::seconds(5)) {
              log::warn("store server: cannot accept ({}); {} clients are connected; "
                        "trying again every 100 ms",
                        net::errno_text(errno), s.clients.size());
              said_cannot_accept = Clock::now();
            }
            accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
          }
          break;
        }
        net::set_no_delay(fd);
        Client& c = s.clients.emplace_back();
        c.fd = net::Fd(fd);
        c.peer = from.to_string();
        c.hello_deadline = Clock::now() + kHelloTime;
        if (s.clients.size() > s.limits.max_clients) {
          if (!said_full)
            log::warn("store server: {} clients, the limit (CHORUS_STORE_MAX_CLIENTS); refusing "
                      "more", s.limits.max_clients);
          said_full = true;
          refuse(c, fmt::format("the store serves {} clients already (CHORUS_STORE_MAX_CLIENTS)",
                                s.limits.max_clients));
          continue;
        }
        c.nonce = auth::random_nonce();
        wire::Writer w;
        w.put(kHelloMagic).put(kProtocol).put(static_cast<std::uint8_t>(secret_ ? 1 : 0));
        w.put_bytes(span_of(c.nonce));
        send(c, w);
      }
    }
    std::size_t i = 2;
    for (auto it = s.clients.begin(); it != s.clients.end(); ++i) {
      Client& c = *it;
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
        // One request at a time: the next waits until this one's reply left.
        if (alive && !c.closing && c.out.empty() && !c.waiter && c.in.size() >= 4) {
          std::uint32_t length;
          std::memcpy(&length, c.in.data(), 4);
          const std::size_t limit =
              c.admitted ? std::max(s.limits.max_value + kMaxKey + 64, kMaxGetRequest) : 4096;
          if (length > limit)
            throw Error(ErrorCode::peer_failure,
                        fmt::format("a message of {} bytes (at most {} here)", length, limit));
          if (c.in.size() >= 4 + std::size_t{length}) {
            handle(c, std::span(c.in).subspan(4, length));
            c.in.erase(c.in.begin(), c.in.begin() + 4 + length);
          }
        }
      } catch (const Error& e) {
        log::warn("store server: dropping client {}: {}", c.peer, e.what());
        alive = false;
      } catch (const std::bad_alloc&) {
        log::warn("store server: out of memory serving {}; dropping it", c.peer);
        alive = false;
      }
      if (alive && !c.out.empty() && (revents & POLLOUT)) {
        const ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (n > 0)
          c.out.erase(c.out.begin(), c.out.begin() + n);
        else if (n < 0 && errno != EAGAIN && errno != EINTR)
          alive = false;
      }
      if (c.closing && c.out.empty()) alive = false;
      it = alive ? std::next(it) : drop(it);
    }
  }
}

// ---- client -----------------------------------------------------------------

TcpStore::TcpStore(const std::string& host, std::uint16_t port, Deadline deadline,
                   StoreAccess access, std::unique_ptr<StoreServer> server)
    : server_(std::move(server)) {
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  url_ = fmt::format("tcp://{}:{}", v6 ? "[" + host + "]" : host, port);
  const net::SocketAddress address = net::resolve(host, port, "CHORUS_STORE", deadline);
  int last_error = 0;
  // Non-blocking connects, so that a server whose SYNs are dropped cannot
  // hold us past the deadline (a blocking connect waits ~2 minutes).
  while (!fd_) {
    net::Fd fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) throw Error(ErrorCode::transport_error, "socket: " + net::errno_text(errno));
    int rc = ::connect(fd.get(), address.get(), address.length);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      rc = ::poll(&p, 1, std::min(remaining_ms(deadline), 1000));
      int err = rc > 0 ? 0 : ETIMEDOUT;
      socklen_t len = sizeof err;
      if (rc > 0) getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      net::set_no_delay(fd.get());
      fd_ = std::move(fd);
      break;
    }
    last_error = errno;
    if (Clock::now() >= deadline)
      throw Error(ErrorCode::timeout,
                  fmt::format("cannot reach the store at {} ({}); is rank 0 or the store server "
                              "running there?",
                              url_, net::errno_text(last_error)));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  handshake(access, deadline);
}

TcpStore::~TcpStore() = default;

void TcpStore::handshake(const StoreAccess& access, Deadline deadline) {
  auto refused = [&](const std::string& why) {
    return Error(ErrorCode::peer_failure, fmt::format("store {} refused this rank: {}", url_, why));
  };
  const Bytes hello = receive_message(deadline);
  wire::Reader r(hello, "handshake of the store " + url_);
  if (r.get<std::uint32_t>() != kHelloMagic)
    throw Error(ErrorCode::peer_failure,
                fmt::format("{} is not a Chorus store (its first bytes are not a handshake)", url_));
  if (const auto version = r.get<std::uint8_t>(); version != kProtocol)
    throw Error(ErrorCode::peer_failure, fmt::format("store {} speaks protocol {}, this rank {}",
                                                     url_, version, kProtocol));
  const auto wants = r.get<std::uint8_t>();
  if (wants == static_cast<std::uint8_t>(Status::error)) throw refused(r.get_string());
  const auto nonce_bytes = r.get_bytes();
  auth::Nonce server_nonce{};
  if (nonce_bytes.size() != server_nonce.size())
    throw Error(ErrorCode::peer_failure, "store " + url_ + ": a handshake nonce of the wrong size");
  std::copy(nonce_bytes.begin(), nonce_bytes.end(), server_nonce.begin());
  if (wants && !access.secret)
    throw refused("it requires the job secret, and this rank has none (set CHORUS_SECRET or "
                  "CHORUS_SECRET_FILE as the other ranks do)");
  if (!wants && access.secret)
    throw Error(ErrorCode::peer_failure,
                fmt::format("store {} does not know the job secret, so it is not this job's "
                            "store (a store served without CHORUS_SECRET, or someone else's); "
                            "refusing it",
                            url_));
  if (!access.secret) auth::note_unauthenticated("this job's store client");

  const auth::Nonce client_nonce = auth::random_nonce();
  wire::Writer w;
  w.put(kHelloMagic).put(kProtocol).put(static_cast<std::uint8_t>(access.secret ? 1 : 0));
  w.put_bytes(span_of(client_nonce));
  if (access.secret)
    w.put_bytes(client_proof(*access.secret, server_nonce, client_nonce, access.job));
  else
    w.put_bytes(std::span<const std::byte>{});
  w.put_string(access.job);
  send_message(w.bytes(), deadline);

  const Bytes answer = receive_message(deadline);
  wire::Reader a(answer, "handshake of the store " + url_);
  if (a.get<std::uint32_t>() != kHelloMagic || a.get<std::uint8_t>() != kProtocol)
    throw Error(ErrorCode::peer_failure, "store " + url_ + ": a malformed handshake answer");
  if (a.get<std::uint8_t>() != static_cast<std::uint8_t>(Status::ok)) throw refused(a.get_string());
  const auto proof = a.get_bytes();
  if (access.secret &&
      !auth::same(digest_from(proof, "store " + url_),
                  server_proof(*access.secret, server_nonce, client_nonce, access.job)))
    throw Error(ErrorCode::peer_failure,
                fmt::format("store {} could not prove it holds the job secret: not this job's "
                            "store; refusing it",
                            url_));
}

void TcpStore::send_message(const std::vector<std::byte>& body, Deadline deadline) {
  const auto message = frame(body);
  std::size_t sent = 0;
  while (sent < message.size()) {
    pollfd p{fd_.get(), POLLOUT, 0};
    const int ready = ::poll(&p, 1, remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0)
      throw Error(ErrorCode::timeout, fmt::format("store {} did not take a request in time", url_));
    const ssize_t n =
        ::send(fd_.get(), message.data() + sent, message.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      throw Error(ErrorCode::peer_failure,
                  fmt::format("store {}: send: {}", url_, net::errno_text(errno)));
    if (n > 0) sent += static_cast<std::size_t>(n);
  }
}

Bytes TcpStore::receive_message(Deadline deadline) {
  std::vector<std::byte> in;
  while (true) {
    pollfd p{fd_.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0)
      throw Error(ErrorCode::timeout, fmt::format("store {} did not answer in time", url_));
    std::byte buf[65536];
    const ssize_t n = ::recv(fd_.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0)
      throw Error(ErrorCode::peer_failure,
                  fmt::format("store {}: the server closed the connection (did rank 0 exit?)", url_));
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      throw Error(ErrorCode::peer_failure,
                  fmt::format("store {}: recv: {}", url_, net::errno_text(errno)));
    if (n > 0) in.insert(in.end(), buf, buf + n);
    if (in.size() >= 4) {
      std::uint32_t length;
      std::memcpy(&length, in.data(), 4);
      if (length > kMaxMessage)
        throw Error(ErrorCode::peer_failure,
                    fmt::format("store {}: a reply of {} bytes", url_, length));
      if (in.size() >= 4 + std::size_t{length})
        return Bytes(in.begin() + 4, in.begin() + 4 + static_cast<std::ptrdiff_t>(length));
    }
  }
}

Bytes TcpStore::call(std::vector<std::byte>& body, Deadline deadline) {
  send_message(body, deadline);
  return receive_message(deadline);
}

namespace {
// A reply with Status::error carries why; anything else unexpected is garbage.
[[noreturn]] void refused(wire::Reader& r, Status status, const std::string& url,
                          const std::string& what) {
  if (status == Status::error)
    throw Error(ErrorCode::invalid_argument, fmt::format("store {}: {}", url, r.get_string()));
  throw Error(ErrorCode::peer_failure, fmt::format("store {}: a malformed reply to {}", url, what));
}
}  // namespace

void TcpStore::set(const std::string& key, std::span<const std::byte> value, Deadline deadline) {
  wire::Writer w;
  w.put(kMagic).put(static_cast<std::uint8_t>(Op::set)).put_string(key).put_bytes(value);
  const auto reply = call(w.bytes(), deadline);
  wire::Reader r(reply, "store reply");
  if (const auto status = static_cast<Status>(r.get<std::uint8_t>()); status != Status::ok)
    refused(r, status, url_, "set(" + key + ")");
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
  if (status == Status::error) refused(r, status, url_, "get");
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

void TcpStore::park(Deadline deadline) {
  wire::Writer w;
  w.put(kMagic).put(static_cast<std::uint8_t>(Op::park));
  const auto reply = call(w.bytes(), deadline);
  wire::Reader r(reply, "store reply from " + url_);
  if (const auto status = static_cast<Status>(r.get<std::uint8_t>()); status != Status::ok)
    refused(r, status, url_, "park");
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta, Deadline deadline) {
  wire::Writer w;
  w.put(kMagic).put(static_cast<std::uint8_t>(Op::add)).put_string(key).put(delta);
  const auto reply = call(w.bytes(), deadline);
  wire::Reader r(reply, "store reply from " + url_);
  if (const auto status = static_cast<Status>(r.get<std::uint8_t>()); status != Status::ok)
    refused(r, status, url_, "add(" + key + ")");
  return r.get<std::int64_t>();
}

}  // namespace chorus::bootstrap
