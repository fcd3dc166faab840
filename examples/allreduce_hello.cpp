// Data-parallel training in miniature: every rank holds a "gradient", and
// AllReduce leaves their average on every rank.
//
// Run it with any launcher chorus understands, for example
//   mpirun -np 4 ./allreduce_hello
//   torchrun --nproc-per-node 4 ./allreduce_hello     (any torchrun-style launcher)
// or by hand, one shell per rank:
//   CHORUS_RANK=0 CHORUS_SIZE=2 CHORUS_STORE=tcp://127.0.0.1:29600 ./allreduce_hello
#include <chorus/chorus.hpp>

#include <cstdio>
#include <span>
#include <vector>

int main() {
  try {
    chorus::Communicator comm = chorus::Communicator::from_env();
    const int rank = comm.rank(), size = comm.size();

    // Rank r's gradient is r + 1 everywhere; the average is (size + 1) / 2.
    std::vector<float> gradient(1 << 20, static_cast<float>(rank + 1));
    comm.allreduce(std::span<float>(gradient), chorus::ReduceOp::avg);

    // The same, asynchronously, overlapping with other work.
    std::vector<double> loss = {static_cast<double>(rank)};
    chorus::Work work = comm.allreduce_async(std::span<double>(loss), chorus::ReduceOp::sum);
    /* ... the next layer's backward pass would run here ... */
    work.wait();

    const float want = static_cast<float>(size + 1) / 2.0f;
    const bool ok = gradient.front() == want && gradient.back() == want &&
                    loss[0] == size * (size - 1) / 2.0;
    std::printf("rank %d of %d over %.*s: average gradient %g (want %g), summed loss %g: %s\n",
                rank, size, static_cast<int>(comm.transport_name().size()),
                comm.transport_name().data(), gradient.front(), want, loss[0], ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  } catch (const chorus::Error& e) {
    std::fprintf(stderr, "allreduce_hello: %s\n", e.what());
    return 1;
  }
}
