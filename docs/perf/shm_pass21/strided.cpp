// Twenty-first pass (docs/performance.md): MPI_Allreduce of N floats laid
// out with a hole after each (MPI_Type_vector(N, 1, 2, MPI_FLOAT)), which
// libchorus_pmpi packs into a staging copy and Open MPI refuses (MPI_SUM
// on a derived datatype). Prints the slowest rank's mean time a call, the
// median of 7 rounds of ITERS calls.
//
//   mpicxx -O2 -o strided strided.cpp
//   mpirun -np 2 -x LD_PRELOAD=.../libchorus_pmpi.so ./strided [N [ITERS]]
#include <mpi.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int n = argc > 1 ? std::atoi(argv[1]) : 262144;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 50;
  MPI_Datatype strided;
  MPI_Type_vector(n, 1, 2, MPI_FLOAT, &strided);
  MPI_Type_commit(&strided);
  std::vector<float> a(2 * n, 1.f), b(2 * n, 0.f);
  std::vector<double> t;
  for (int round = 0; round < 7; ++round) {
    MPI_Barrier(MPI_COMM_WORLD);
    double s = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(a.data(), b.data(), 1, strided, MPI_SUM, MPI_COMM_WORLD);
    double e = (MPI_Wtime() - s) / iters * 1e6, m;
    MPI_Allreduce(&e, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(m);
  }
  std::sort(t.begin(), t.end());
  if (rank == 0) std::printf("%d floats strided: %.1f us (median of 7 rounds)\n", n, t[3]);
  if (b[0] != 2.f && rank == 0) std::printf("wrong: %f\n", b[0]);
  MPI_Type_free(&strided);
  MPI_Finalize();
}
