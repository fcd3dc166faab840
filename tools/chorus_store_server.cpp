// A standalone rendezvous store, for jobs whose rank 0 should not serve it
// (or for launchers that start ranks before any of them is known).
//
//   chorus_store_server [host:port]
//
// With a job secret (CHORUS_SECRET or CHORUS_SECRET_FILE, as the job's ranks
// have it) only ranks that prove it are served, and the default address is
// 0.0.0.0:0 (every interface, a free port). Without one anyone who reaches
// it could read and write the job's keys, so the default is 127.0.0.1:0 and
// listening elsewhere is allowed but warned about.
//
// Prints "tcp://host:port" on the first line of stdout once it is serving,
// then serves until SIGINT or SIGTERM.
#include "bootstrap/tcp_store.hpp"
#include "common/logging.hpp"
#include "common/secret.hpp"
#include "common/socket.hpp"

#include <csignal>
#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  if (argc > 2 ||
      (argc == 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help"))) {
    std::fprintf(stderr,
                 "usage: %s [host:port]   (default: a free port on 0.0.0.0 with CHORUS_SECRET or "
                 "CHORUS_SECRET_FILE set, else on 127.0.0.1)\n",
                 argv[0]);
    return 2;
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // the server thread inherits this
  try {
    auto secret = chorus::auth::Secret::from_env();
    const char* fallback = secret ? "0.0.0.0:0" : "127.0.0.1:0";
    auto [host, port] =
        chorus::net::split_host_port(argc == 2 ? argv[1] : fallback, "chorus_store_server");
    if (!secret && host != "127.0.0.1" && host != "::1" && host != "localhost")
      std::fprintf(stderr,
                   "chorus_store_server: warning: serving %s without a job secret: anyone who "
                   "reaches it can read and change the job's keys (set CHORUS_SECRET_FILE)\n",
                   host.c_str());
    chorus::bootstrap::StoreServer server(host, port, std::move(secret));
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
