// Twenty-third pass (docs/performance.md), step 4: what Chorus's engine
// adds to a nonblocking call waited for at once, without MPI. Two ranks
// (this process and a fork) meet at a TCP store on loopback; each round
// times N 8-byte allgathers blocking, then N made async (deferred, as
// libchorus_pmpi makes them) and waited for with wait_progressing(), as
// its MPI_Wait does; rank 0 prints "block US" and "async US" per round.
//
//   g++ -O2 -std=c++20 -Iinclude -Ibuild/include async_loop.cpp -Lbuild/src -lchorus
//       -Wl,-rpath,$PWD/build/src -o /tmp/async_loop   (from the repository root)
//   /tmp/async_loop N tcp://127.0.0.1:PORT     (ONLY=1: the async loops only)
#include <chorus/communicator.hpp>

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
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s N tcp://127.0.0.1:PORT\n", argv[0]);
    return 2;
  }
  const int n = std::atoi(argv[1]);
  const std::string store = argv[2];
  const int rank = fork() == 0 ? 1 : 0;
  Communicator comm = Communicator::connect(rank, 2, store);
  std::vector<int> send(2, rank), recv(4);
  CallOptions deferred;
  deferred.deferred = true;
  const std::function<void()> progress = [] {};
  const int first_kind = std::getenv("ONLY") ? std::atoi(std::getenv("ONLY")) : 0;
  for (int round = 0; round < 6; ++round) {
    for (int kind = first_kind; kind < 2; ++kind) {
      comm.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) {
        if (kind == 0) {
          comm.allgather(send.data(), recv.data(), 2, DataType::int32);
        } else {
          Work work = comm.allgather_async(send.data(), recv.data(), 2, DataType::int32, deferred);
          work.wait_progressing(progress);
        }
      }
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / n;
      if (rank == 0) std::printf("%s %.3f\n", kind ? "async" : "block", us);
    }
  }
  if (rank == 0) wait(nullptr);
}
