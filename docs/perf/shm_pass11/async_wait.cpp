// run.sh step 5: an 8-byte AllReduce, blocking and as an async call waited
// at once, through libchorus.so on a communicator from MPI_COMM_WORLD
// (mpirun -np 2); medians of 5 series of 20000 calls. Built by run.sh.
#include <chorus/chorus.hpp>
#include <chorus/mpi.hpp>
#include <mpi.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  chorus::Communicator comm = chorus::Communicator::from_mpi(MPI_COMM_WORLD);
  float in[256] = {1}, out[256];
  const int n = 20000;
  std::vector<double> a, b;
  for (int rep = 0; rep < 5; ++rep) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) comm.allreduce(in, out, 2, chorus::DataType::float32, chorus::ReduceOp::sum);
    auto t1 = std::chrono::steady_clock::now();
    MPI_Barrier(MPI_COMM_WORLD);
    auto t2 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) comm.allreduce_async(in, out, 2, chorus::DataType::float32, chorus::ReduceOp::sum).wait();
    auto t3 = std::chrono::steady_clock::now();
    a.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
    b.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count() / n);
  }
  std::sort(a.begin(), a.end()); std::sort(b.begin(), b.end());
  if (rank == 0) std::printf("blocking %.3f us, async+wait %.3f us\n", a[2], b[2]);
  MPI_Finalize();
}
