// A standalone rendezvous store, for jobs whose rank 0 should not serve it
// (or for launchers that start ranks before any of them is known).
//
//   chorus_store_server [host:port]       default 0.0.0.0:0 (a free port)
//
// Prints "tcp://host:port" on the first line of stdout once it is serving,
// then serves until SIGINT or SIGTERM.
#include "bootstrap/tcp_store.hpp"
#include "common/socket.hpp"

#include <csignal>
#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  if (argc > 2 ||
      (argc == 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help"))) {
    std::fprintf(stderr, "usage: %s [host:port]   (default 0.0.0.0:0, a free port)\n", argv[0]);
    return 2;
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // the server thread inherits this
  try {
    auto [host, port] =
        chorus::net::split_host_port(argc == 2 ? argv[1] : "0.0.0.0:0", "chorus_store_server");
    chorus::bootstrap::StoreServer server(host, port);
    std::printf("%s\n", server.url().c_str());
    std::fflush(stdout);
    int signal = 0;
    sigwait(&stop, &signal);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorus_store_server: %s\n", e.what());
    return 1;
  }
}
