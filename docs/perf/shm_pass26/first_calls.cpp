// Twenty-sixth pass (docs/performance.md): what the first calls on a new
// communicator cost against the calls after them. For each of K new
// communicators (MPI_Comm_dup): its creation with its first 8-byte
// MPI_Allreduce (libchorus_pmpi creates the Chorus communicator and its
// host segment then), the next 255 calls (the rest of the segment's first
// pass through its ring of 256 entries) and the 768 after. Prints rank 0's
// medians over the communicators: "creation_ms,first_pass_us,later_us".
//
//   mpicxx -O2 -o first_calls first_calls.cpp
//   mpirun -np P [preload] ./first_calls [K]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int communicators = argc > 1 ? std::atoi(argv[1]) : 5;
  constexpr int kFirstPass = 255, kLater = 768;
  long x = 1, y = 0;
  std::vector<double> creation, first, later;
  for (int k = 0; k < communicators; ++k) {
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    MPI_Allreduce(&x, &y, 1, MPI_LONG, MPI_SUM, comm);
    const double t1 = MPI_Wtime();
    for (int i = 0; i < kFirstPass; ++i) MPI_Allreduce(&x, &y, 1, MPI_LONG, MPI_SUM, comm);
    const double t2 = MPI_Wtime();
    for (int i = 0; i < kLater; ++i) MPI_Allreduce(&x, &y, 1, MPI_LONG, MPI_SUM, comm);
    const double t3 = MPI_Wtime();
    creation.push_back((t1 - t0) * 1e3);
    first.push_back((t2 - t1) * 1e6 / kFirstPass);
    later.push_back((t3 - t2) * 1e6 / kLater);
    MPI_Comm_free(&comm);
  }
  if (rank == 0) std::printf("%.2f,%.2f,%.2f\n", median(creation), median(first), median(later));
  MPI_Finalize();
}
