/* Chorus from MPI programs, in C: link -lchorus_mpi -lchorus (pkg-config
 * chorus_mpi). See chorus/mpi.hpp for the contract of the C++ form. */
#ifndef CHORUS_CHORUS_MPI_H
#define CHORUS_CHORUS_MPI_H

#include <chorus/chorus.h>

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A communicator over the ranks of `mpi_comm` (an intra-communicator), with
 * the same ranks; bootstrapped with its own all-gather. Collective over
 * mpi_comm. Destroy it before MPI_Finalize. */
CHORUS_C_API chorus_result_t chorus_comm_init_from_mpi(chorus_comm_t* comm, MPI_Comm mpi_comm);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_CHORUS_MPI_H */
