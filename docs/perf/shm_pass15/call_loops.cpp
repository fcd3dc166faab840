// Fourteenth and fifteenth passes (docs/performance.md; the fifteenth
// added the rooted gather and scatter as kinds 14-17, which the
// fourteenth's run.sh leaves out, and the twenty-second MPI_Allgatherv as
// kind 18): loops of one MPI call after another,
// each kind in turn, as a plain MPI program (each pass's run.sh builds and
// runs it). Nonblocking calls are waited at once. Each kind runs 3
// rounds of N calls between barriers; the figure is the slowest rank's mean
// per call, the better of rounds 2 and 3. The nonblocking kinds after the
// blocking ones come more than 100 ms after the last nonblocking call: what
// found an idle Chorus worker woken in vain by every submit.
//
//   mpicxx -O2 -o call_loops call_loops.cpp
//   mpirun -np 2 ./call_loops [N [INTS [KINDS]]]   (KINDS: "0,4,11": only those)
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int n = argc > 1 ? std::atoi(argv[1]) : 30000;
  const int ints = argc > 2 ? std::atoi(argv[2]) : 2;  // per block: 8 bytes
  const std::string kinds = argc > 3 ? std::string(",") + argv[3] + "," : "";
  int p = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  std::vector<int> send(static_cast<std::size_t>(ints) * p), recv(send.size());
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<int>(i) + rank;
  int* s = send.data();
  int* r = recv.data();
  const char* names[] = {"MPI_Ibcast",   "MPI_Ireduce",    "MPI_Iallreduce",
                         "MPI_Iallgather", "MPI_Bcast",    "MPI_Reduce",
                         "MPI_Allreduce", "MPI_Allgather", "MPI_Alltoall",
                         "MPI_Reduce_scatter_block", "MPI_Barrier", "MPI_Ibarrier",
                         "MPI_Ialltoall", "MPI_Ireduce_scatter_block", "MPI_Gather",
                         "MPI_Scatter", "MPI_Gatherv", "MPI_Scatterv", "MPI_Allgatherv"};
  std::vector<int> counts(p, ints), displs(p);
  for (int j = 0; j < p; ++j) displs[j] = j * ints;
  for (int kind = 0; kind < 19; ++kind) {
    if (!kinds.empty() && kinds.find("," + std::to_string(kind) + ",") == std::string::npos) continue;
    double best = 1e30;
    for (int round = 0; round < 3; ++round) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      for (int i = 0; i < n; ++i) {
        MPI_Request q = MPI_REQUEST_NULL;
        switch (kind) {
          case 0: MPI_Ibcast(s, ints, MPI_INT, 0, MPI_COMM_WORLD, &q); break;
          case 1: MPI_Ireduce(s, r, ints, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD, &q); break;
          case 2: MPI_Iallreduce(s, r, ints, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q); break;
          case 3: MPI_Iallgather(s, ints, MPI_INT, r, ints, MPI_INT, MPI_COMM_WORLD, &q); break;
          case 4: MPI_Bcast(s, ints, MPI_INT, 0, MPI_COMM_WORLD); break;
          case 5: MPI_Reduce(s, r, ints, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD); break;
          case 6: MPI_Allreduce(s, r, ints, MPI_INT, MPI_SUM, MPI_COMM_WORLD); break;
          case 7: MPI_Allgather(s, ints, MPI_INT, r, ints, MPI_INT, MPI_COMM_WORLD); break;
          case 8: MPI_Alltoall(s, ints, MPI_INT, r, ints, MPI_INT, MPI_COMM_WORLD); break;
          case 9: MPI_Reduce_scatter_block(s, r, ints, MPI_INT, MPI_SUM, MPI_COMM_WORLD); break;
          case 10: MPI_Barrier(MPI_COMM_WORLD); break;
          case 11: MPI_Ibarrier(MPI_COMM_WORLD, &q); break;
          case 12: MPI_Ialltoall(s, ints, MPI_INT, r, ints, MPI_INT, MPI_COMM_WORLD, &q); break;
          case 13: MPI_Ireduce_scatter_block(s, r, ints, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q); break;
          case 14: MPI_Gather(s, ints, MPI_INT, r, ints, MPI_INT, 0, MPI_COMM_WORLD); break;
          case 15: MPI_Scatter(s, ints, MPI_INT, r, ints, MPI_INT, 0, MPI_COMM_WORLD); break;
          case 16:
            MPI_Gatherv(s, ints, MPI_INT, r, counts.data(), displs.data(), MPI_INT, 0, MPI_COMM_WORLD);
            break;
          case 17:
            MPI_Scatterv(s, counts.data(), displs.data(), MPI_INT, r, ints, MPI_INT, 0, MPI_COMM_WORLD);
            break;
          case 18:
            MPI_Allgatherv(s, ints, MPI_INT, r, counts.data(), displs.data(), MPI_INT, MPI_COMM_WORLD);
            break;
        }
        if (q != MPI_REQUEST_NULL) MPI_Wait(&q, MPI_STATUS_IGNORE);
      }
      double mine = (MPI_Wtime() - start) / n * 1e6, slowest = 0;
      MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (round > 0 && slowest < best) best = slowest;
    }
    if (rank == 0) std::printf("%s,%d,%.3f\n", names[kind], ints * 4, best);
  }
  MPI_Finalize();
  return 0;
}
