// TCP transport: the fallback that works wherever there is IP.
//
// Non-blocking sockets under one epoll set. Up to 64 ranks (or with
// CHORUS_SOCKET_CONNECT=eager) connect() builds the full mesh: rank i
// connects to every lower rank and accepts the higher ones. Beyond that (or
// with =lazy) a link opens at the first message to or from a peer, so a
// rank of a large job holds sockets only for the peers it talks to. A
// connection starts with a challenge-response (frames.hpp): both ends prove
// they hold the job's link key, derived from rank 0's address blob and the
// job secret, so a stray, stale or impostor process is refused and logged.
// With lazy links a rank need not know every address up front:
// connect_looking_up() starts knowing rank 0's, and a peer's address is
// looked up (at the store) when its link is first wanted, so that a rank of
// a large job fetches the addresses of the peers it talks to, not all p.
//
// Frames: a 32-byte header (magic, version, type, tag, length, id), checked
// before any of it is used. Messages up to the eager limit go in one EAGER
// frame and are received straight into the posted buffer when one is posted
// (else buffered). Larger ones send RTS; the receiver answers CTS once a
// matching receive exists (or REJECT when it is too small), and the sender
// then streams the DATA straight from its buffer into the receiver's, in
// 512 KiB frames that every other frame overtakes (peer.hpp queue_frame).
// So an unexpected large message costs no memory at the receiver, a receive
// never blocks the connection for other tags, and a small message waits
// behind a large one for one DATA frame at most.
//
// Anything malformed closes that connection with a logged reason and fails
// the requests with that peer; it never crashes the process.
//
// Address choice: CHORUS_SOCKET_ADDR (an IPv4 or IPv6 literal), else the
// first address of the interfaces named by CHORUS_SOCKET_IFNAME (a comma
// list of prefixes; "^" excludes, "=" matches exactly, as NCCL_SOCKET_IFNAME),
// else the first up, non-loopback, non-virtual interface, else loopback.
#pragma once

#include "common/secret.hpp"
#include "common/socket.hpp"
#include "transport/transport.hpp"

#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace chorus::transport {

class TcpTransport final : public Transport {
 public:
  struct Options {
    std::size_t eager_limit = 64 * 1024;
    // SO_SNDBUF/SO_RCVBUF; 0 leaves the kernel's autotuning alone.
    // CHORUS_SOCKET_BUFFER overrides.
    int socket_buffer = 0;
    // The job secret the links are keyed with (besides the address blobs);
    // unset: CHORUS_SECRET(_FILE), if any.
    std::optional<auth::Secret> secret;
  };

  TcpTransport(int rank, int size, Options options);
  TcpTransport(int rank, int size) : TcpTransport(rank, size, Options{}) {}
  ~TcpTransport() override;

  std::string_view name() const noexcept override { return "tcp"; }
  AddressBlob address() override;
  void connect(std::span<const AddressBlob> addresses, Deadline deadline) override;

  bool connects_lazily() const override { return lazy_links(size()); }
  // (Rank 0's address, known from the start, gives the link key.)
  void connect_looking_up(const AddressBlob& rank0, AddressLookup lookup,
                          Deadline deadline) override;
  // Whether the links of a job of `size` ranks open at the first message
  // (CHORUS_SOCKET_CONNECT: eager, lazy, or auto: lazy beyond 64 ranks).
  static bool lazy_links(int size);
  RequestPtr isend(int peer, Tag tag, const void* buf, std::size_t bytes) override;
  RequestPtr irecv(int peer, Tag tag, void* buf, std::size_t bytes) override;
  bool probe(int peer, Tag tag) override;
  bool progress() override;
  void wait_for_activity(Deadline until) override;
  void abort(const std::string& reason) override;

  // The address this rank listens on ("127.0.0.1:41234").
  std::string listen_address() const { return listen_address_.to_string(); }
  // What messages from `peer` that no receive has taken yet hold here.
  std::size_t unexpected_bytes(int peer) const;

  struct Peer;  // per-connection state: transport/tcp/peer.hpp

 private:
  struct Incoming;  // a connection in its handshake: links.cpp
  Peer& peer_at(int rank);  // made at first use
  std::string where_of(int rank) const;
  void start(Deadline deadline);  // connect()'s common part, once addresses_ is set
  bool look_up(Peer& peer);       // its address known (looked up if need be), or it failed
  bool handle_events(int timeout_ms);
  // links.cpp: opening, accepting and proving links.
  void want_link(Peer& peer);
  void start_link(Peer& peer, Clock::time_point give_up_at);
  void open_link(Peer& peer);
  void close_link(Peer& peer);
  void retry_link(Peer& peer, Clock::duration after);
  void link_failed(Peer& peer, const std::string& why);
  void on_link_event(Peer& peer);
  void link_established(Peer& peer);
  void accept_incoming();
  void on_incoming_event(Incoming& in);
  void drop_incoming(Incoming& in);
  bool on_link_key(std::uint64_t key, std::uint32_t events);
  int link_housekeeping(int timeout_ms);
  bool read_from(Peer& peer);
  bool read_failed(Peer& peer, long n);
  bool write_to(Peer& peer);
  void on_header(Peer& peer);
  void on_payload(Peer& peer);
  void fail_peer(Peer& peer, const std::string& reason);
  void update_interest(Peer& peer);
  void pause_reading(Peer& peer);
  bool resume_reading(Peer& peer);
  RequestPtr self_send(Tag tag, const void* buf, std::size_t bytes);

  Options options_;
  net::SocketAddress listen_address_;
  net::Fd listener_;
  net::Fd epoll_;
  std::uint64_t nonce_;
  std::optional<auth::Secret> link_key_;  // set by connect()
  std::uint64_t job_id_ = 0;              // the link key's fingerprint
  std::uint64_t next_send_id_ = 1;
  std::size_t max_unexpected_ = 0;  // per peer: CHORUS_SOCKET_UNEXPECTED_BYTES
  std::vector<std::unique_ptr<Peer>> peers_;  // by rank, made at first use; [rank()]: self-sends
  std::vector<AddressBlob> addresses_;        // by rank, from connect(); empty: not looked up yet
  AddressLookup lookup_;                      // connect_looking_up()'s
  std::list<Incoming> incoming_;              // accepted, not yet proven
  std::vector<int> retrying_;                 // ranks whose link opens again later
  Clock::time_point accept_paused_until_{};   // out of descriptors: not accepting until then
  Clock::time_point last_refusal_log_{};
  Clock::time_point said_cannot_accept_{};    // the last "cannot accept" WARN
  std::string aborted_;  // after abort(): the reason peers made later are dead with
  bool lazy_ = false;    // links open at the first message (CHORUS_SOCKET_CONNECT)
  bool connected_ = false;
};

}  // namespace chorus::transport
