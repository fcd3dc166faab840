// Open MPI alone (no Chorus): 8-byte MPI_Ibcast and MPI_Ireduce, each
// waited at once, back to back, in rounds of 2000 calls (MPI_Ibarrier's
// round between them). The first round of each runs several times slower
// than the later ones, so what such a loop measures depends on what the
// process did before it (a rooted nonblocking call completes on the root,
// or on the senders, without waiting for the others: they may run ahead).
// mpi_collectives_bench's 8-byte MPI_Ibcast / MPI_Ireduce rows differed
// between its run with the library and its run without for that reason:
// those calls go to MPI in both (docs/performance.md, twelfth pass).
//
//   mpicxx -O2 rooted_nonblocking.cpp -o /tmp/rooted_nonblocking
//   mpirun -np 2 /tmp/rooted_nonblocking
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int send[2] = {1, 2}, recv[2] = {0, 0};
  const char* names[] = {"MPI_Ibcast", "MPI_Ireduce", "MPI_Ibarrier"};
  constexpr int kCalls = 2000;
  for (int round = 1; round <= 3; ++round) {
    for (int kind = 0; kind < 3; ++kind) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      for (int i = 0; i < kCalls; ++i) {
        MPI_Request r;
        if (kind == 0) MPI_Ibcast(send, 2, MPI_INT, 0, MPI_COMM_WORLD, &r);
        if (kind == 1) MPI_Ireduce(send, recv, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD, &r);
        if (kind == 2) MPI_Ibarrier(MPI_COMM_WORLD, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
      }
      const double us = (MPI_Wtime() - start) / kCalls * 1e6;
      if (rank == 0) std::printf("round %d %-12s %6.2f us\n", round, names[kind], us);
    }
  }
  MPI_Finalize();
  return 0;
}
