/* An MPI program that uses Chorus explicitly: a Chorus communicator made
 * from MPI_COMM_WORLD and one from an MPI_Comm_split, with no store and no
 * environment variables; MPI moves the transport addresses.
 *
 *   mpicc mpi_allreduce.c -lchorus_mpi -lchorus   (or pkg-config chorus_mpi)
 *   mpirun -np 4 ./mpi_allreduce */
#include <chorus/chorus_mpi.h>

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call, comm)                                                                \
  do {                                                                                   \
    chorus_result_t result_ = (call);                                                    \
    if (result_ != chorus_success) {                                                     \
      fprintf(stderr, "%s failed: %s: %s\n", #call, chorus_get_error_string(result_),    \
              chorus_get_last_error(comm));                                              \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                      \
    }                                                                                    \
  } while (0)

/* Sum of (rank in `comm` + 1) over `comm`, checked against size * (size + 1) / 2. */
static int check_sum(chorus_comm_t comm, const char* name, int world_rank) {
  int rank = 0, size = 0;
  CHECK(chorus_comm_rank(comm, &rank), comm);
  CHECK(chorus_comm_size(comm, &size), comm);
  enum { kCount = 100000 };
  double* values = malloc(kCount * sizeof *values);
  if (values == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  for (int i = 0; i < kCount; ++i) values[i] = rank + 1;
  CHECK(chorus_allreduce(values, values, kCount, chorus_float64, chorus_sum, comm), comm);
  const double want = size * (size + 1) / 2.0;
  const int ok = values[0] == want && values[kCount - 1] == want;
  printf("world rank %d: %s rank %d of %d: sum %g (want %g): %s\n", world_rank, name, rank, size,
         values[0], want, ok ? "ok" : "WRONG");
  free(values);
  return ok;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);

  chorus_comm_t world = NULL;
  CHECK(chorus_comm_init_from_mpi(&world, MPI_COMM_WORLD), NULL);
  int ok = check_sum(world, "world", world_rank);

  /* Even and odd ranks apart; Chorus ranks follow the split's keys. */
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
  chorus_comm_t chorus_half = NULL;
  CHECK(chorus_comm_init_from_mpi(&chorus_half, half), NULL);
  ok &= check_sum(chorus_half, world_rank % 2 ? "odd" : "even", world_rank);

  /* Chorus communicators go before MPI_Finalize. */
  CHECK(chorus_comm_destroy(chorus_half), NULL);
  CHECK(chorus_comm_destroy(world), NULL);
  MPI_Comm_free(&half);
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (world_rank == 0) printf("mpi_allreduce: %s\n", all_ok ? "all ranks ok" : "WRONG");
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
