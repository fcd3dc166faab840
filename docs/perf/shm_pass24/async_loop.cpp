// Twenty-fourth pass (docs/performance.md), step 3: what Chorus's engine
// adds to a nonblocking call waited for at once, without MPI, as the
// twenty-third pass's async_loop.cpp measured it, at p = 1 (this process
// alone: only the engine's fixed work) and at p = 2 (this process and a
// fork, each bound to its own core, as mpirun binds two ranks). The ranks
// meet at a TCP store on loopback; each round times N 8-byte allgathers
// made async (deferred, as libchorus_pmpi makes them) and waited for with
// wait_progressing(), as its MPI_Wait does; rank 0 prints "async US"
// (ns at p = 1) per round, 6 rounds.
//
//   g++ -O2 -std=c++20 -Iinclude -Ibuild/include async_loop.cpp -Lbuild/src -lchorus
//       -Wl,-rpath,$PWD/build/src -o /tmp/async_loop24   (from the repository root)
//   /tmp/async_loop24 N P tcp://127.0.0.1:PORT
#include <chorus/communicator.hpp>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

using namespace chorus;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s N P(1|2) tcp://127.0.0.1:PORT\n", argv[0]);
    return 2;
  }
  const int n = std::atoi(argv[1]), p = std::atoi(argv[2]);
  const int rank = p == 2 && fork() == 0 ? 1 : 0;
  if (p == 2) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    CPU_SET(rank, &cpus);
    sched_setaffinity(0, sizeof cpus, &cpus);
  }
  Communicator comm = Communicator::connect(rank, p, argv[3]);
  std::vector<int> send(2, rank), recv(2 * static_cast<std::size_t>(p));
  CallOptions deferred;
  deferred.deferred = true;
  const std::function<void()> progress = [] {};
  for (int round = 0; round < 6; ++round) {
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i)
      comm.allgather_async(send.data(), recv.data(), 2, DataType::int32, deferred).wait_progressing(progress);
    const double per_call = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / n;
    if (rank == 0) std::printf("async,%.4f\n", p == 1 ? per_call * 1e9 : per_call * 1e6);
  }
  if (rank == 0 && p == 2) wait(nullptr);
}
