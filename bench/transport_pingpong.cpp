// One side of a two-process transport benchmark; bench/transport_bench.py
// starts the pair (and the baselines) and prints the comparison.
//
//   transport_pingpong --transport tcp|ucx|socket --test lat|bw --size BYTES --iters N
//
// Rank, size (2) and store come from CHORUS_RANK/CHORUS_SIZE/CHORUS_STORE.
// lat: ping-pong, one-way latency = half the round trip, in microseconds.
// bw:  rank 0 streams N messages to rank 1 with up to 16 in flight, then
//      waits for a 1-byte ack; bandwidth in MiB/s (2^20 bytes), the unit
//      ucx_perftest calls MB/s. `socket` is the baseline for tcp: blocking sockets with
//      TCP_NODELAY, plain send/recv loops, nothing else. `socket-spin` is
//      the same with non-blocking calls polled in a loop, which never sleeps:
//      the fair baseline for latency, since Chorus polls before sleeping.
// init: no messages; the time from rank 0's start to every rank connected
//      (any CHORUS_SIZE), in milliseconds.
// Rank 0 prints "result <number>".
#include "bootstrap/launch.hpp"
#include "common/socket.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

using namespace chorus;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string transport = "tcp", test = "lat";
  std::size_t size = 8;
  int iters = 10000;
  std::size_t window = 16;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--transport") a.transport = v;
    else if (k == "--test") a.test = v;
    else if (k == "--size") a.size = std::stoull(v);
    else if (k == "--iters") a.iters = std::stoi(v);
    else if (k == "--window") a.window = std::stoull(v);
    else throw std::runtime_error("unknown flag " + k);
  }
  return a;
}

int g_spin_flag = 0;  // MSG_DONTWAIT for socket-spin

void send_all(int fd, const void* p, std::size_t n) {
  auto* b = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, b, n, MSG_NOSIGNAL | g_spin_flag);
    if (k < 0 && errno == EAGAIN) continue;
    if (k <= 0) throw std::runtime_error("send failed");
    b += k, n -= static_cast<std::size_t>(k);
  }
}
void recv_all(int fd, void* p, std::size_t n) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = ::recv(fd, b, n, g_spin_flag);
    if (k < 0 && errno == EAGAIN) continue;
    if (k <= 0) throw std::runtime_error("recv failed");
    b += k, n -= static_cast<std::size_t>(k);
  }
}

double run_socket(const Args& a, int rank, bootstrap::Store& store, transport::Deadline deadline) {
  net::Fd fd;
  if (rank == 0) {
    auto address = net::resolve("127.0.0.1", 0, "bench");
    net::Fd listener = net::listen_on(address);
    store.set("raw/port", bootstrap::to_bytes(std::to_string(address.port())), deadline);
    fd = net::Fd(::accept(listener.get(), nullptr, nullptr));
  } else {
    const std::string key[] = {"raw/port"};
    const int port = std::stoi(bootstrap::to_string(store.get(key, deadline)[0]));
    auto address = net::resolve("127.0.0.1", static_cast<std::uint16_t>(port), "bench");
    fd = net::Fd(::socket(AF_INET, SOCK_STREAM, 0));
    if (::connect(fd.get(), address.get(), address.length) != 0)
      throw std::runtime_error("connect failed");
  }
  net::set_no_delay(fd.get());
  std::vector<char> buf(a.size);
  char ack = 0;
  const int warmup = a.iters / 10;
  Clock::time_point start;
  for (int i = 0; i < warmup + a.iters; ++i) {
    if (i == warmup) start = Clock::now();
    if (a.test == "lat") {
      if (rank == 0) send_all(fd.get(), buf.data(), a.size), recv_all(fd.get(), buf.data(), a.size);
      else recv_all(fd.get(), buf.data(), a.size), send_all(fd.get(), buf.data(), a.size);
    } else {
      if (rank == 0) send_all(fd.get(), buf.data(), a.size);
      else recv_all(fd.get(), buf.data(), a.size);
    }
  }
  if (a.test == "bw") {
    if (rank == 1) send_all(fd.get(), &ack, 1);
    else recv_all(fd.get(), &ack, 1);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return a.test == "lat" ? seconds / a.iters / 2 * 1e6 : double(a.size) * a.iters / seconds / 1048576.0;
}

double run_transport(const Args& a, transport::Transport& t, transport::Deadline deadline) {
  const int rank = t.rank(), peer = 1 - rank;
  std::vector<char> buf(a.size);
  char ack = 0;
  const int warmup = a.iters / 10;
  Clock::time_point start;
  if (a.test == "lat") {
    for (int i = 0; i < warmup + a.iters; ++i) {
      if (i == warmup) start = Clock::now();
      if (rank == 0) {
        t.wait(*t.isend(peer, 1, buf.data(), a.size), deadline);
        t.wait(*t.irecv(peer, 1, buf.data(), a.size), deadline);
      } else {
        t.wait(*t.irecv(peer, 1, buf.data(), a.size), deadline);
        t.wait(*t.isend(peer, 1, buf.data(), a.size), deadline);
      }
    }
  } else {
    // A sliding window: the oldest of --window (16) in flight is waited for
    // before the next is posted, so the pipe never drains.
    const std::size_t kWindow = a.window;
    std::deque<transport::RequestPtr> window;
    for (int i = 0; i < warmup + a.iters; ++i) {
      if (i == warmup) {
        for (auto& r : window) t.wait(*r, deadline);
        window.clear();
        start = Clock::now();
      }
      if (window.size() == kWindow) {
        t.wait(*window.front(), deadline);
        window.pop_front();
      }
      window.push_back(rank == 0 ? t.isend(peer, 2, buf.data(), a.size)
                                 : t.irecv(peer, 2, buf.data(), a.size));
    }
    for (auto& r : window) t.wait(*r, deadline);
    if (rank == 1) t.wait(*t.isend(peer, 3, &ack, 1), deadline);
    else t.wait(*t.irecv(peer, 3, &ack, 1), deadline);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return a.test == "lat" ? seconds / a.iters / 2 * 1e6 : double(a.size) * a.iters / seconds / 1048576.0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto started = Clock::now();
  try {
    const Args a = parse(argc, argv);
    const auto info = bootstrap::launch_info_from_env();
    const auto deadline = transport::deadline_after(120);
    std::shared_ptr<bootstrap::Store> store = bootstrap::open_store(info.store, false, deadline);
    double result;
    if (a.transport == "socket" || a.transport == "socket-spin") {
      if (a.transport == "socket-spin") g_spin_flag = MSG_DONTWAIT;
      result = run_socket(a, info.rank, *store, deadline);
    } else {
      const auto kind =
          a.transport == "ucx" ? bootstrap::TransportKind::ucx : bootstrap::TransportKind::tcp;
      auto t = bootstrap::connect_transport(kind, info.rank, info.size, store, "bench", deadline);
      if (a.test == "init") {
        // Connected here; the barrier says when every rank is.
        store->barrier("bench/connected", info.size, deadline);
        result = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
      } else {
        result = run_transport(a, *t, deadline);
      }
      store->barrier("bench/done", info.size, deadline);
    }
    if (info.rank == 0) std::printf("result %.4f\n", result);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transport_pingpong: %s\n", e.what());
    return 1;
  }
}
