#include "bootstrap/store.hpp"

#include "bootstrap/file_store.hpp"
#include "bootstrap/tcp_store.hpp"
#include "common/logging.hpp"
#include "common/socket.hpp"

#include <fmt/format.h>

namespace chorus::bootstrap {

Bytes to_bytes(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return Bytes(p, p + s.size());
}

std::string to_string(const Bytes& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

void Store::barrier(const std::string& name, int count, Deadline deadline) {
  const std::string done = name + "/done";
  if (add(name + "/arrived", 1, deadline) == count) set(done, to_bytes("1"), deadline);
  const std::string keys[] = {done};
  get(keys, deadline);
}

std::unique_ptr<Store> open_store(const std::string& url, bool serve, Deadline deadline) {
  if (url.rfind("file://", 0) == 0) return std::make_unique<FileStore>(url.substr(7));
  if (url.rfind("tcp://", 0) == 0) {
    StoreAccess access = StoreAccess::from_env();
    auto [host, port] = net::split_host_port(url.substr(6), "CHORUS_STORE");
    std::unique_ptr<StoreServer> server;
    if (serve) {
      if (port == 0)
        throw Error(
            ErrorCode::invalid_argument,
            "CHORUS_STORE=" + url +
                ": rank 0 serves the store, so the other ranks must "
                "know its port; give one (or run chorus_store_server and point them to it)");
      // Serve unless a store already listens there (chorus_store_server):
      // then rank 0 is a client like the others.
      server = StoreServer::serve_if_free(host, port, access.secret);
      if (!server) log::info("store: {} is already served; rank 0 connects as a client", url);
    }
    return std::make_unique<TcpStore>(host, port, deadline, std::move(access), std::move(server));
  }
  throw Error(ErrorCode::invalid_argument,
              "CHORUS_STORE='" + url + "': expected tcp://host:port or file:///directory");
}

}  // namespace chorus::bootstrap
