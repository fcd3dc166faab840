// The tail of AllReduce latency: times every call of a long run of
// back-to-back AllReduces one by one, and prints the median, p90, p99,
// p99.9 and max, for Chorus and (launched with mpirun, built with MPI) for
// MPI_Allreduce on the same buffers, alternating blocks of calls so that
// both see the same machine.
//
//   mpirun -np 2 ./build/bin/allreduce_tail -n 100000 -b 8
//   CHORUS_RANK=.. CHORUS_SIZE=.. CHORUS_STORE=.. ./build/bin/allreduce_tail   (Chorus only)
//
// Rank 0 prints; each rank times its own calls and the figures are rank 0's
// (a call ends on every rank within a message of the others).
#include <chorus/chorus.hpp>

#if defined(CHORUS_TAIL_WITH_MPI)
#include <mpi.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  long calls = 100000;
  std::size_t bytes = 8;
  bool mpi = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (flag == "-n" && value) a.calls = std::atol(argv[++i]);
    else if (flag == "-b" && value) a.bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (flag == "--mpi") a.mpi = true;
    else {
      std::fprintf(stderr, "usage: allreduce_tail [-n calls] [-b bytes] [--mpi]\n");
      std::exit(2);
    }
  }
  if (a.calls < 100 || a.bytes < 4) {
    std::fprintf(stderr, "allreduce_tail: -n must be at least 100 and -b at least 4\n");
    std::exit(2);
  }
  return a;
}

void report(const char* who, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[std::min(us.size() - 1, static_cast<std::size_t>(q * us.size()))]; };
  std::printf("%-8s %10zu %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", who, us.size(), at(0.5), at(0.9),
              at(0.99), at(0.999), us.back(), at(0.99) / at(0.5));
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
#if defined(CHORUS_TAIL_WITH_MPI)
  if (args.mpi) MPI_Init(&argc, &argv);
#else
  if (args.mpi) {
    std::fprintf(stderr, "allreduce_tail: built without MPI\n");
    return 2;
  }
#endif
  try {
    chorus::Communicator comm = chorus::Communicator::from_env();
    const std::size_t count = args.bytes / 4;
    std::vector<float> send(count, 1.0f), recv(count);
    std::vector<double> chorus_us, mpi_us;
    chorus_us.reserve(static_cast<std::size_t>(args.calls));
    if (args.mpi) mpi_us.reserve(static_cast<std::size_t>(args.calls));
    constexpr long kBlock = 1000;  // calls per turn, alternating
    for (long done = -kBlock; done < args.calls; done += kBlock) {  // the first block warms up
      const bool timed = done >= 0;
      for (long i = 0; i < kBlock; ++i) {
        const auto start = Clock::now();
        comm.allreduce(send.data(), recv.data(), count, chorus::DataType::float32,
                       chorus::ReduceOp::sum);
        if (timed) chorus_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
#if defined(CHORUS_TAIL_WITH_MPI)
      if (args.mpi)
        for (long i = 0; i < kBlock; ++i) {
          const auto start = Clock::now();
          MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
          if (timed) mpi_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
        }
#endif
    }
    if (comm.rank() == 0) {
      std::printf("# allreduce_tail: %zu-byte float sum AllReduce, %d ranks, %ld calls each, one by one\n",
                  count * 4, comm.size(), args.calls);
      std::printf("%-8s %10s %9s %9s %9s %9s %9s %9s\n", "#", "calls", "p50_us", "p90_us", "p99_us",
                  "p99.9_us", "max_us", "p99/p50");
      report("chorus", chorus_us);
      if (args.mpi) report("mpi", mpi_us);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_tail: %s\n", e.what());
    return 1;
  }
#if defined(CHORUS_TAIL_WITH_MPI)
  if (args.mpi) MPI_Finalize();
#endif
  return 0;
}
