// Built only when the installed chorus has chorus::mpi: proves that its
// header and target work from outside. Linked, not run (running needs mpirun;
// the tests in tests/mpi do that on the build tree).
#include <chorus/chorus_mpi.h>
#include <chorus/mpi.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    auto comm = chorus::Communicator::from_mpi(MPI_COMM_WORLD);
    float x = 1;
    comm.allreduce(&x, &x, 1, chorus::DataType::float32, chorus::ReduceOp::sum);
  }
  chorus_comm_t c = nullptr;
  if (chorus_comm_init_from_mpi(&c, MPI_COMM_WORLD) == chorus_success) chorus_comm_destroy(c);
  MPI_Finalize();
  return 0;
}
