// Twenty-third pass (docs/performance.md), step 5: what the first large
// call pays for its scratch's pages. Two ranks (this process and a fork)
// meet at a TCP store on loopback; rank 0 prints the time of the first and
// the second in-place AllReduce of BYTES bytes (float32 sum).
//
//   g++ -O2 -std=c++20 -Iinclude -Ibuild/include first_call.cpp -Lbuild/src -lchorus
//       -Wl,-rpath,$PWD/build/src -o /tmp/first_call   (from the repository root)
//   CHORUS_SHM=0 CHORUS_ALGO=halving_doubling /tmp/first_call BYTES tcp://127.0.0.1:PORT
#include <chorus/communicator.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace chorus;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s BYTES tcp://127.0.0.1:PORT\n", argv[0]);
    return 2;
  }
  const std::size_t count = std::strtoull(argv[1], nullptr, 10) / sizeof(float);
  const std::string store = argv[2];
  const int rank = fork() == 0 ? 1 : 0;
  Communicator comm = Communicator::connect(rank, 2, store);
  std::vector<float> x(count, 1.0f);  // touched: only Chorus's own pages are new
  double ms[2];
  for (double& t : ms) {
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    comm.allreduce(x.data(), x.data(), count, DataType::float32, ReduceOp::sum);
    t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  if (rank == 0) {
    std::printf("%.1f,%.1f\n", ms[0], ms[1]);
    wait(nullptr);
  }
}
