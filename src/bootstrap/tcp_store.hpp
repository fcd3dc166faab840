// tcp:// rendezvous store: the server and the client.
//
// Wire format: every message is a u32 length and a body. A connection opens
// with a handshake: the server's hello (a fresh nonce, and whether it wants
// the job secret), the client's (its nonce, its proof of the secret, and the
// job it belongs to), and the server's answer (its own proof, so that the
// client knows it reached its job's store and not a planted one). Then each
// request is the magic "CHST", an op and its fields (see tcp_store.cpp).
//
// The server checks every length before use and drops a client that sends
// garbage, logging why; it never stops serving the others. Everything it
// holds is bounded (docs/security.md): values, the bytes of all values,
// replies, clients, and one request in progress per client (it reads no
// further request from a client whose last reply has not left). Keys live
// in the namespace of the client's job and go when the job's last client
// leaves, so a later job on the same server starts clean, and two jobs at
// once see each other's keys only if they share a job name.
#pragma once

#include "bootstrap/store.hpp"
#include "common/secret.hpp"
#include "common/socket.hpp"

#include <optional>

#include <atomic>
#include <memory>
#include <thread>

namespace chorus::bootstrap {

class StoreServer {
 public:
  // Binds host:port (port 0 picks a free one) and serves on a thread of its
  // own. Destruction stops accepting, then keeps answering connected clients
  // until they leave (at most 10 s), so that the last replies of a job still
  // reach the other ranks when the serving rank finishes first; clients that
  // parked (Store::park) are not waited for.
  // With a secret, only clients that prove they hold it are served.
  StoreServer(const std::string& host, std::uint16_t port,
              std::optional<auth::Secret> secret = std::nullopt);
  ~StoreServer();
  // A server on host:port, or nullptr when something already listens there
  // (a standalone store server, say). Other failures throw.
  static std::unique_ptr<StoreServer> serve_if_free(const std::string& host, std::uint16_t port,
                                                    std::optional<auth::Secret> secret);
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // tcp://host:port with the port actually bound.
  std::string url() const;
  std::uint16_t port() const noexcept { return address_.port(); }

 private:
  struct State;
  StoreServer(const std::string& host, net::SocketAddress address, net::Fd listener,
              std::optional<auth::Secret> secret);
  void serve();

  net::SocketAddress address_;
  std::string host_;
  std::optional<auth::Secret> secret_;
  net::Fd listener_;
  net::Fd wake_;  // eventfd that stops the thread
  std::unique_ptr<State> state_;
  std::thread thread_;
};

// Who a client is at the store: the job secret it proves, if any, and the
// job whose keys it sees ("" for the default namespace).
struct StoreAccess {
  std::optional<auth::Secret> secret;
  std::string job;
  // The secret from CHORUS_SECRET(_FILE), the job from job_name_from_env().
  static StoreAccess from_env();
};

// The job's name at a shared store: CHORUS_JOB_ID, else the launcher's job
// (torchrun's TORCHELASTIC_RUN_ID, Slurm's SLURM_JOB_ID.SLURM_STEP_ID, Open
// MPI's PMIX_NAMESPACE), else "".
std::string job_name_from_env();

class TcpStore final : public Store {
 public:
  // Connects to a server at host:port, retrying until `deadline`, and
  // proves `access.secret` to it (and it to us). With `server`, this store
  // also owns (keeps alive) that server.
  TcpStore(const std::string& host, std::uint16_t port, Deadline deadline, StoreAccess access = {},
           std::unique_ptr<StoreServer> server = nullptr);
  ~TcpStore() override;

  void set(const std::string& key, std::span<const std::byte> value, Deadline deadline) override;
  std::vector<Bytes> get(std::span<const std::string> keys, Deadline deadline) override;
  std::int64_t add(const std::string& key, std::int64_t delta, Deadline deadline) override;
  std::string url() const override { return url_; }
  void park(Deadline deadline) override;

 private:
  Bytes call(std::vector<std::byte>& request, Deadline deadline);
  void send_message(const std::vector<std::byte>& body, Deadline deadline);
  Bytes receive_message(Deadline deadline);
  void handshake(const StoreAccess& access, Deadline deadline);

  std::unique_ptr<StoreServer> server_;  // destroyed after the connection
  std::string url_;
  net::Fd fd_;
};

}  // namespace chorus::bootstrap
