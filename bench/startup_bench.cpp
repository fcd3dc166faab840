// Start-up at scale: how long N ranks take from nothing to "connected, and
// a first message through", and what each rank holds by then.
//
//   startup_bench --ranks N [--per-process M] [--all-addresses] [--ucx]
//
// The ranks are threads, M to a process (default 512; a process holds a
// few descriptors per rank, and the machine's limit is per process), all
// meeting at one store server with a job secret, as a real job would:
// every rank creates its TCP transport (with --ucx: its UCX transport),
// publishes its address and connects as Chorus does (beyond 64 ranks:
// bootstrap::connect_looking_up, links or endpoints and addresses at the
// first message), then sends 8 bytes to the next rank of a ring and
// receives from the previous. With --all-addresses every rank
// fetches every address first (store_allgather), the way Chorus started
// before lookups, for comparison. Printed: the time until every rank had
// met at the store (and, with --all-addresses, had every address), until
// every ring message arrived, the store server's CPU time, and the memory
// per rank (each process's resident growth over its ranks, the worst
// process).
#include "bootstrap/launch.hpp"
#include "bootstrap/tcp_store.hpp"
#include "common/secret.hpp"
#include "transport/tcp/tcp_transport.hpp"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace chorus;
using Clock = std::chrono::steady_clock;

namespace {

long resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}

struct Report {  // one process's ranks, sent to the parent through a pipe
  double addresses_s = 0;  // the last of its ranks to be through the rendezvous
  double ring_s = 0;       // the last of its ranks to have its ring message
  long grown_kib = 0;      // resident growth over the process's ranks
  int ranks = 0;
  int failures = 0;
  char error[256] = {};
};

// A process's transports, kept until every process has finished: a rank
// whose links close early would fail its peers still connecting.
std::vector<std::unique_ptr<transport::Transport>> transports;

Report run_ranks(int first, int count, int size, std::uint16_t port, const std::string& secret,
                 bool all_addresses, bool ucx, Clock::time_point start) {
  Report report;
  report.ranks = count;
  const long before = resident_kib();
  std::atomic<double> addresses{0}, ring{0};
  std::atomic<int> failures{0};
  std::mutex error_mutex;
  auto at_least = [](std::atomic<double>& a, double v) {
    double old = a.load();
    while (old < v && !a.compare_exchange_weak(old, v)) {
    }
  };
  transports.resize(static_cast<std::size_t>(count));
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i)
    threads.emplace_back([&, i] {
      const int rank = first + i;
      try {
        const auto deadline = transport::deadline_after(300);
        auto& t = transports[static_cast<std::size_t>(i)];
        if (ucx) {
          t = bootstrap::make_transport(bootstrap::TransportKind::ucx, rank, size);
        } else {
          transport::TcpTransport::Options options;
          options.secret = auth::Secret(secret);
          t = std::make_unique<transport::TcpTransport>(rank, size, options);
        }
        bootstrap::StoreAccess access{auth::Secret(secret), "startup"};
        auto store =
            std::make_shared<bootstrap::TcpStore>("127.0.0.1", port, deadline, std::move(access));
        if (all_addresses || !t->connects_lazily()) {
          const auto blobs =
              bootstrap::store_allgather(*store, "startup", rank, size, deadline)(t->address());
          store.reset();
          at_least(addresses, std::chrono::duration<double>(Clock::now() - start).count());
          t->connect(blobs, deadline);
        } else {
          bootstrap::connect_looking_up(*t, std::move(store), "startup", deadline);
          at_least(addresses, std::chrono::duration<double>(Clock::now() - start).count());
        }
        std::uint64_t out = static_cast<std::uint64_t>(rank), in = ~0ull;
        auto r = t->irecv((rank + size - 1) % size, 1, &in, sizeof in);
        t->wait(*t->isend((rank + 1) % size, 1, &out, sizeof out), deadline);
        t->wait(*r, deadline);
        if (in != static_cast<std::uint64_t>((rank + size - 1) % size))
          throw std::runtime_error("wrong ring message");
        at_least(ring, std::chrono::duration<double>(Clock::now() - start).count());
      } catch (const std::exception& e) {
        if (failures++ == 0) {
          std::lock_guard lock(error_mutex);
          std::snprintf(report.error, sizeof report.error, "rank %d: %s", rank, e.what());
        }
      }
    });
  for (auto& t : threads) t.join();
  // Measured with every rank's transport still alive and connected; the
  // ranks' threads (stacks) are gone, as a real rank's would not be here.
  report.grown_kib = resident_kib() - before;
  report.addresses_s = addresses;
  report.ring_s = ring;
  report.failures = failures;
  return report;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 256, per_process = 512;
  bool all_addresses = false, ucx = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc) ranks = std::atoi(argv[++i]);
    else if (a == "--per-process" && i + 1 < argc) per_process = std::atoi(argv[++i]);
    else if (a == "--all-addresses") all_addresses = true;
    else if (a == "--ucx") ucx = true;
    else {
      std::fprintf(stderr, "usage: %s --ranks N [--per-process M] [--all-addresses] [--ucx]\n", argv[0]);
      return 2;
    }
  }
  if (ranks < 2 || per_process < 1) return 2;
  const std::string secret = auth::generate_secret_text();
  const auto start = Clock::now();

  // Every process is forked before the store server's thread starts: a
  // child forked while that thread holds one of OpenSSL's locks (hashing a
  // handshake) would wait on that lock forever. The children learn the
  // server's port through a pipe.
  struct Child {
    pid_t pid;
    int report_fd;
    int release_fd;
    int port_fd;
  };
  std::vector<Child> children;
  for (int first = 0; first < ranks; first += per_process) {
    const int count = std::min(per_process, ranks - first);
    int report[2], release[2], port[2];
    if (pipe(report) != 0 || pipe(release) != 0 || pipe(port) != 0) return 1;
    const pid_t pid = fork();
    if (pid == 0) {
      close(report[0]);
      close(release[1]);
      close(port[1]);
      std::uint16_t server_port = 0;
      if (read(port[0], &server_port, sizeof server_port) != sizeof server_port) _exit(1);
      Report r = run_ranks(first, count, ranks, server_port, secret, all_addresses, ucx, start);
      [[maybe_unused]] auto n = write(report[1], &r, sizeof r);
      char c;
      [[maybe_unused]] auto m = read(release[0], &c, 1);  // until every process is done
      transports.clear();
      _exit(r.failures == 0 ? 0 : 1);
    }
    close(report[1]);
    close(release[0]);
    close(port[0]);
    children.push_back({pid, report[0], release[1], port[1]});
  }
  bootstrap::StoreServer server("127.0.0.1", 0, auth::Secret(secret));
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  for (auto& c : children) {
    const std::uint16_t port = server.port();
    if (write(c.port_fd, &port, sizeof port) != sizeof port) return 1;
    close(c.port_fd);
  }
  Report total;
  long worst_kib_per_rank = 0;
  for (auto& c : children) {
    Report r;
    if (read(c.report_fd, &r, sizeof r) != sizeof r) {
      std::fprintf(stderr, "startup_bench: a process died without reporting\n");
      return 1;
    }
    total.addresses_s = std::max(total.addresses_s, r.addresses_s);
    total.ring_s = std::max(total.ring_s, r.ring_s);
    total.failures += r.failures;
    if (r.error[0]) std::fprintf(stderr, "startup_bench: %d failures, the first: %s\n", r.failures, r.error);
    worst_kib_per_rank = std::max(worst_kib_per_rank, r.grown_kib / std::max(1, r.ranks));
  }
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  const double server_cpu = seconds(after.ru_utime) - seconds(before.ru_utime) +
                            seconds(after.ru_stime) - seconds(before.ru_stime);
  for (auto& c : children) close(c.release_fd);
  int bad = 0;
  for (auto& c : children) {
    int status = 0;
    waitpid(c.pid, &status, 0);
    bad += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::printf("# ranks  processes  addresses_s  connected_s  store_cpu_s  kib_per_rank  failures\n");
  std::printf("%7d  %9zu  %11.2f  %11.2f  %11.2f  %12ld  %8d\n", ranks, children.size(),
              total.addresses_s, total.ring_s, server_cpu, worst_kib_per_rank, total.failures);
  return total.failures == 0 && bad == 0 ? 0 : 1;
}
