// An OSU-style benchmark of the MPI collectives libchorus_pmpi takes over:
// a plain MPI program (it knows nothing of Chorus), run once as it is and
// once with the library preloaded, so that the two runs' figures compare
// what the program's calls cost before and after.
//
//   mpirun -np 4 ./build/bench/mpi_collectives_bench [--iters N] [--csv FILE]
//   mpirun -np 4 -x LD_PRELOAD=$PWD/build/src/libchorus_pmpi.so ./build/bench/mpi_collectives_bench
//
// For each call and each block size (the bytes one rank contributes or
// receives per peer: 8 B, 1 KiB, 64 KiB, 1 MiB of MPI_INT), the time of one
// call is the slowest rank's mean over the timed iterations (after a
// warm-up), and busbw follows nccl-tests: algbw (the call's bytes over its
// time) times (p - 1) / p for the gathers, scatters, all-to-alls and
// reduce-scatters, 2 (p - 1) / p for AllReduce, algbw itself for broadcast
// and reduce. Nonblocking calls are timed from their start to MPI_Wait's
// return. (The blocking AllReduce, broadcast, reduce, allgather, alltoall,
// reduce-scatter-block and barrier rows came with the fourteenth pass,
// docs/performance.md.) bench/mpi_collectives_report.py reads two or more
// of these CSV files.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

struct Call {
  const char* name;
  double (*bus_factor)(int p);  // busbw = algbw * this, as nccl-tests count
  std::function<void(int block_ints)> run;
  // Bytes one call moves, for algbw: `block` bytes per rank (or in all).
  std::size_t (*bytes)(std::size_t block, int p);
};

std::size_t per_rank(std::size_t block, int p) { return block * static_cast<std::size_t>(p); }
std::size_t whole(std::size_t block, int) { return block; }
// The gathers, scatters, all-to-alls and reduce-scatters: (p - 1) / p;
// AllReduce: twice that; broadcast and reduce: 1; barrier: 0.
double shared(int p) { return static_cast<double>(p - 1) / p; }
double twice_shared(int p) { return 2.0 * (p - 1) / p; }
double one(int) { return 1; }
double none(int) { return 0; }

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, p = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  int iters_small = 500;
  const char* csv_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters_small = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) csv_path = argv[++i];
  }
  const int max_ints = (1 << 20) / 4;
  const auto up = static_cast<std::size_t>(p);
  std::vector<int> send(max_ints * up), recv(max_ints * up);
  std::vector<int> counts(up), displs(up);
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<int>(i);
  auto uniform = [&](int n) {
    for (int j = 0; j < p; ++j) {
      counts[static_cast<std::size_t>(j)] = n;
      displs[static_cast<std::size_t>(j)] = j * n;
    }
  };
  auto wait = [](MPI_Request r) { MPI_Wait(&r, MPI_STATUS_IGNORE); };
  const int root = 0;
  const std::vector<Call> calls = {
      {"MPI_Allreduce", twice_shared, [&](int n) { MPI_Allreduce(send.data(), recv.data(), n, MPI_INT, MPI_SUM, MPI_COMM_WORLD); }, whole},
      {"MPI_Bcast", one, [&](int n) { MPI_Bcast(send.data(), n, MPI_INT, root, MPI_COMM_WORLD); }, whole},
      {"MPI_Reduce", one, [&](int n) { MPI_Reduce(send.data(), recv.data(), n, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD); }, whole},
      {"MPI_Allgather", shared, [&](int n) { MPI_Allgather(send.data(), n, MPI_INT, recv.data(), n, MPI_INT, MPI_COMM_WORLD); }, per_rank},
      {"MPI_Alltoall", shared, [&](int n) { MPI_Alltoall(send.data(), n, MPI_INT, recv.data(), n, MPI_INT, MPI_COMM_WORLD); }, per_rank},
      {"MPI_Reduce_scatter_block", shared, [&](int n) { MPI_Reduce_scatter_block(send.data(), recv.data(), n, MPI_INT, MPI_SUM, MPI_COMM_WORLD); }, per_rank},
      {"MPI_Barrier", none, [&](int) { MPI_Barrier(MPI_COMM_WORLD); }, whole},
      {"MPI_Allgatherv", shared, [&](int n) { uniform(n); MPI_Allgatherv(send.data(), n, MPI_INT, recv.data(), counts.data(), displs.data(), MPI_INT, MPI_COMM_WORLD); }, per_rank},
      {"MPI_Reduce_scatter", shared, [&](int n) { uniform(n); MPI_Reduce_scatter(send.data(), recv.data(), counts.data(), MPI_INT, MPI_SUM, MPI_COMM_WORLD); }, per_rank},
      {"MPI_Alltoallv", shared, [&](int n) { uniform(n); MPI_Alltoallv(send.data(), counts.data(), displs.data(), MPI_INT, recv.data(), counts.data(), displs.data(), MPI_INT, MPI_COMM_WORLD); }, per_rank},
      {"MPI_Gather", shared, [&](int n) { MPI_Gather(send.data(), n, MPI_INT, recv.data(), n, MPI_INT, root, MPI_COMM_WORLD); }, per_rank},
      {"MPI_Gatherv", shared, [&](int n) { uniform(n); MPI_Gatherv(send.data(), n, MPI_INT, recv.data(), counts.data(), displs.data(), MPI_INT, root, MPI_COMM_WORLD); }, per_rank},
      {"MPI_Scatter", shared, [&](int n) { MPI_Scatter(send.data(), n, MPI_INT, recv.data(), n, MPI_INT, root, MPI_COMM_WORLD); }, per_rank},
      {"MPI_Scatterv", shared, [&](int n) { uniform(n); MPI_Scatterv(send.data(), counts.data(), displs.data(), MPI_INT, recv.data(), n, MPI_INT, root, MPI_COMM_WORLD); }, per_rank},
      {"MPI_Ibcast", one, [&](int n) { MPI_Request r; MPI_Ibcast(send.data(), n, MPI_INT, root, MPI_COMM_WORLD, &r); wait(r); }, whole},
      {"MPI_Ireduce", one, [&](int n) { MPI_Request r; MPI_Ireduce(send.data(), recv.data(), n, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD, &r); wait(r); }, whole},
      {"MPI_Iallgather", shared, [&](int n) { MPI_Request r; MPI_Iallgather(send.data(), n, MPI_INT, recv.data(), n, MPI_INT, MPI_COMM_WORLD, &r); wait(r); }, per_rank},
      {"MPI_Ireduce_scatter_block", shared, [&](int n) { MPI_Request r; MPI_Ireduce_scatter_block(send.data(), recv.data(), n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r); wait(r); }, per_rank},
      {"MPI_Ialltoall", shared, [&](int n) { MPI_Request r; MPI_Ialltoall(send.data(), n, MPI_INT, recv.data(), n, MPI_INT, MPI_COMM_WORLD, &r); wait(r); }, per_rank},
      {"MPI_Ibarrier", none, [&](int) { MPI_Request r; MPI_Ibarrier(MPI_COMM_WORLD, &r); wait(r); }, whole},
  };
  const int sizes[] = {8, 1024, 64 << 10, 1 << 20};  // bytes per block
  const char* preload = std::getenv("LD_PRELOAD");
  const bool chorus = preload != nullptr && std::strstr(preload, "chorus_pmpi") != nullptr;
  std::FILE* csv = nullptr;
  if (rank == 0 && csv_path) {
    csv = std::fopen(csv_path, "w");
    if (csv) std::fprintf(csv, "library,ranks,call,bytes,time_us,busbw_gbs\n");
  }
  if (rank == 0)
    std::printf("# %s, %d ranks\n# %-26s %10s %12s %12s\n", chorus ? "with libchorus_pmpi" : "MPI alone", p,
                "call", "bytes", "time (us)", "busbw (GB/s)");
  for (const Call& call : calls) {
    for (int bytes : sizes) {
      if (call.bus_factor == none && bytes != sizes[0]) continue;  // the barriers: one size
      const int n = bytes / 4 > 0 ? bytes / 4 : 1;
      const int iters = std::max(10, bytes >= (64 << 10) ? iters_small / 25 : iters_small);
      for (int i = 0; i < std::max(3, iters / 10); ++i) call.run(n);  // warm-up
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      for (int i = 0; i < iters; ++i) call.run(n);
      double mine = (MPI_Wtime() - start) / iters, slowest = 0;
      MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      if (rank != 0) continue;
      const std::size_t block = static_cast<std::size_t>(n) * 4;
      const double busbw = static_cast<double>(call.bytes(block, p)) / slowest / 1e9 * call.bus_factor(p);
      std::printf("  %-26s %10zu %12.2f %12.3f\n", call.name, block, slowest * 1e6, busbw);
      if (csv)
        std::fprintf(csv, "%s,%d,%s,%zu,%.3f,%.4f\n", chorus ? "chorus_pmpi" : "mpi", p, call.name,
                     block, slowest * 1e6, busbw);
    }
  }
  if (csv) std::fclose(csv);
  MPI_Finalize();
  return 0;
}
