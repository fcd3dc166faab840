// tcp:// rendezvous store: the server and the client.
//
// Wire format: every message is a u32 length and a body; a request body is
// the magic "CHST", an op and its fields (see tcp_store.cpp). The server
// checks every length before use and drops a client that sends garbage,
// logging why; it never stops serving the others.
#pragma once

#include "bootstrap/store.hpp"
#include "common/socket.hpp"

#include <atomic>
#include <memory>
#include <thread>

namespace chorus::bootstrap {

class StoreServer {
 public:
  // Binds host:port (port 0 picks a free one) and serves on a thread of its
  // own. Destruction stops accepting, then keeps answering connected clients
  // until they leave (at most 10 s), so that the last replies of a job still
  // reach the other ranks when the serving rank finishes first.
  StoreServer(const std::string& host, std::uint16_t port);
  ~StoreServer();
  // A server on host:port, or nullptr when something already listens there
  // (a standalone store server, say). Other failures throw.
  static std::unique_ptr<StoreServer> serve_if_free(const std::string& host, std::uint16_t port);
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // tcp://host:port with the port actually bound.
  std::string url() const;
  std::uint16_t port() const noexcept { return address_.port(); }

 private:
  struct State;
  StoreServer(const std::string& host, net::SocketAddress address, net::Fd listener);
  void serve();

  net::SocketAddress address_;
  std::string host_;
  net::Fd listener_;
  net::Fd wake_;  // eventfd that stops the thread
  std::unique_ptr<State> state_;
  std::thread thread_;
};

class TcpStore final : public Store {
 public:
  // Connects to a server at host:port, retrying until `deadline`. With
  // `server`, this store also owns (keeps alive) that server.
  TcpStore(const std::string& host, std::uint16_t port, Deadline deadline,
           std::unique_ptr<StoreServer> server = nullptr);
  ~TcpStore() override;

  void set(const std::string& key, std::span<const std::byte> value, Deadline deadline) override;
  std::vector<Bytes> get(std::span<const std::string> keys, Deadline deadline) override;
  std::int64_t add(const std::string& key, std::int64_t delta, Deadline deadline) override;
  std::string url() const override { return url_; }

 private:
  Bytes call(std::vector<std::byte>& request, Deadline deadline);

  std::unique_ptr<StoreServer> server_;  // destroyed after the connection
  std::string url_;
  net::Fd fd_;
};

}  // namespace chorus::bootstrap
