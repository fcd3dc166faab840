// Chorus from MPI programs: a Communicator over the ranks of an MPI_Comm.
// Link chorus::mpi (libchorus_mpi); libchorus itself never depends on MPI.
//
//   MPI_Init(&argc, &argv);
//   auto comm = chorus::Communicator::from_mpi(MPI_COMM_WORLD);
//   comm.allreduce(std::span(grads), chorus::ReduceOp::sum);
//
// from_mpi is collective over the MPI communicator (any intra-communicator:
// MPI_COMM_WORLD, one from MPI_Comm_split or MPI_Comm_dup). It exchanges the
// transport addresses with that communicator's own all-gather; no store and
// no environment variables are needed. The Chorus communicator is
// independent of the MPI one afterwards: it may outlive MPI_Comm_free, but
// not MPI_Finalize's end of the process's network resources (destroy it
// before MPI_Finalize).
#pragma once

#include <chorus/communicator.hpp>

#include <mpi.h>

namespace chorus {

extern template Communicator Communicator::from_mpi<MPI_Comm>(MPI_Comm comm,
                                                                         const Options& options);

}  // namespace chorus
