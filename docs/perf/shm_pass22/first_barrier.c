/* Twenty-second pass, step 6: the time of a program's first MPI_Barrier,
 * which with libchorus_pmpi preloaded makes the Chorus communicator. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const double start = MPI_Wtime();
  MPI_Barrier(MPI_COMM_WORLD);
  const double first = MPI_Wtime() - start;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) printf("first barrier %.1f ms\n", first * 1e3);
  MPI_Finalize();
  return 0;
}
