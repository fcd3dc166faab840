/* Chorus C ABI: MPI-style collectives for frameworks and C programs,
 * modelled on NCCL's API. Link with -lchorus (pkg-config chorus).
 *
 * Every function returns chorus_result_t; chorus_success is 0. No function
 * throws or aborts the process: a failure is a result code, and
 * chorus_get_last_error() says what went wrong. After a collective fails,
 * the communicator is poisoned: later calls fail at once with the same
 * error; destroy it (or abort it) and make a new one.
 *
 * Buffers: sendbuf == recvbuf means in place. float16 and bfloat16 buffers
 * hold raw 16-bit IEEE binary16 / bfloat16 values.
 *
 * Threads: one thread at a time per communicator; different communicators
 * are independent. */
#ifndef CHORUS_CHORUS_H
#define CHORUS_CHORUS_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define CHORUS_C_API __attribute__((visibility("default")))
#else
#define CHORUS_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The error kinds of chorus::Error, plus success. */
typedef enum {
  chorus_success = 0,
  chorus_invalid_argument = 1, /* a caller's argument is wrong; nothing was sent */
  chorus_unsupported = 2,      /* valid request this build or machine cannot do */
  chorus_timeout = 3,          /* a deadline passed (CHORUS_TIMEOUT) */
  chorus_peer_failure = 4,     /* a peer died, disconnected or sent garbage */
  chorus_mismatched_collective = 5, /* ranks called different collectives or arguments */
  chorus_transport_error = 6,  /* the network or a transport library failed */
  chorus_internal_error = 7,   /* a bug in chorus: please report it */
  chorus_aborted = 8           /* the communicator was aborted */
} chorus_result_t;

typedef enum {
  chorus_int8 = 0,
  chorus_uint8 = 1,
  chorus_int32 = 2,
  chorus_uint32 = 3,
  chorus_int64 = 4,
  chorus_uint64 = 5,
  chorus_float16 = 6,
  chorus_bfloat16 = 7,
  chorus_float32 = 8,
  chorus_float64 = 9
} chorus_datatype_t;

typedef enum {
  chorus_sum = 0,
  chorus_prod = 1,
  chorus_min = 2,
  chorus_max = 3,
  chorus_avg = 4, /* floating-point types only */
  chorus_band = 5, /* integer types only, as bor and bxor */
  chorus_bor = 6,
  chorus_bxor = 7
} chorus_redop_t;

typedef struct chorus_comm* chorus_comm_t;

/* "success", "invalid argument", "timeout", ... */
CHORUS_C_API const char* chorus_get_error_string(chorus_result_t result);
/* The message of the last failed call on `comm`; with comm == NULL, of the
 * last failed chorus_comm_init* on this thread. Valid until the next call
 * on the same communicator (or thread). "" when there was none. */
CHORUS_C_API const char* chorus_get_last_error(chorus_comm_t comm);

/* Rank, size and store from the environment (CHORUS_RANK, CHORUS_SIZE,
 * CHORUS_STORE, or torchrun's, Open MPI's, PMI's or Slurm's variables).
 * Collective over all ranks of the job. */
CHORUS_C_API chorus_result_t chorus_comm_init_from_env(chorus_comm_t* comm);
/* This process is `rank` of `size`, meeting at `store` ("tcp://host:port",
 * served by rank 0, or "file:///shared/dir"). Collective. */
CHORUS_C_API chorus_result_t chorus_comm_init(chorus_comm_t* comm, int rank, int size,
                                              const char* store);
/* Bootstraps through the caller's own collective (a framework's process
 * group) instead of a store: every rank calls allgather(sendbuf, bytes,
 * recvbuf, context) at the same time with the same `bytes`; it must fill
 * recvbuf with size * bytes bytes, rank r's at r * bytes, and return 0 (any
 * other value fails the init). Collective. For MPI, see chorus_mpi.h. */
typedef int (*chorus_allgather_fn)(const void* sendbuf, size_t bytes, void* recvbuf,
                                   void* context);
CHORUS_C_API chorus_result_t chorus_comm_init_with_allgather(chorus_comm_t* comm, int rank,
                                                             int size,
                                                             chorus_allgather_fn allgather,
                                                             void* context);
/* Ranks of `comm` passing the same color form *newcomm, ranked by key (ties
 * by rank in comm), as ncclCommSplit / MPI_Comm_split; color
 * CHORUS_SPLIT_NOCOLOR joins none (*newcomm = NULL). The new communicator
 * has its own connections, made through comm (no store), and may run
 * collectives at the same time as comm. Collective over comm. */
#define CHORUS_SPLIT_NOCOLOR (-1)
CHORUS_C_API chorus_result_t chorus_comm_split(chorus_comm_t comm, int color, int key,
                                               chorus_comm_t* newcomm);
/* The same ranks in the same order, a communicator of their own. Collective. */
CHORUS_C_API chorus_result_t chorus_comm_dup(chorus_comm_t comm, chorus_comm_t* newcomm);
CHORUS_C_API chorus_result_t chorus_comm_rank(chorus_comm_t comm, int* rank);
CHORUS_C_API chorus_result_t chorus_comm_size(chorus_comm_t comm, int* size);
/* Finishes this rank's pending work and frees the communicator. */
CHORUS_C_API chorus_result_t chorus_comm_destroy(chorus_comm_t comm);
/* Ends pending work with an error (telling the peers where the transport
 * can) and frees the communicator, as ncclCommAbort does. */
CHORUS_C_API chorus_result_t chorus_comm_abort(chorus_comm_t comm);

/* recvbuf = op over all ranks of sendbuf, count elements of datatype. */
CHORUS_C_API chorus_result_t chorus_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                                              chorus_datatype_t datatype, chorus_redop_t op,
                                              chorus_comm_t comm);

/* The other collectives, as Communicator's (chorus/communicator.hpp has the
 * buffer rules, in place included). */
/* root's count elements into every rank's buffer (ncclBcast). */
CHORUS_C_API chorus_result_t chorus_broadcast(void* buffer, size_t count,
                                              chorus_datatype_t datatype, int root,
                                              chorus_comm_t comm);
/* recvbuf (at root only; may be NULL elsewhere) = op over all ranks of sendbuf. */
CHORUS_C_API chorus_result_t chorus_reduce(const void* sendbuf, void* recvbuf, size_t count,
                                           chorus_datatype_t datatype, chorus_redop_t op,
                                           int root, chorus_comm_t comm);
/* recvbuf (size blocks of count_per_rank) gets rank j's sendbuf in block j. */
CHORUS_C_API chorus_result_t chorus_allgather(const void* sendbuf, void* recvbuf,
                                              size_t count_per_rank,
                                              chorus_datatype_t datatype, chorus_comm_t comm);
/* sendbuf holds size blocks; recvbuf gets block `rank` reduced over all ranks. */
CHORUS_C_API chorus_result_t chorus_reduce_scatter(const void* sendbuf, void* recvbuf,
                                                   size_t count_per_rank,
                                                   chorus_datatype_t datatype,
                                                   chorus_redop_t op, chorus_comm_t comm);
/* Block j of sendbuf goes to rank j, into block `rank` of its recvbuf. */
CHORUS_C_API chorus_result_t chorus_alltoall(const void* sendbuf, void* recvbuf,
                                             size_t count_per_rank, chorus_datatype_t datatype,
                                             chorus_comm_t comm);
/* Root's recvbuf (size blocks of count; may be NULL elsewhere) gets rank j's
 * sendbuf in block j. */
CHORUS_C_API chorus_result_t chorus_gather(const void* sendbuf, void* recvbuf, size_t count,
                                           chorus_datatype_t datatype, int root,
                                           chorus_comm_t comm);
/* Block j of root's sendbuf (may be NULL elsewhere) goes to rank j's recvbuf. */
CHORUS_C_API chorus_result_t chorus_scatter(const void* sendbuf, void* recvbuf, size_t count,
                                            chorus_datatype_t datatype, int root,
                                            chorus_comm_t comm);
/* Returns once every rank has called it. */
CHORUS_C_API chorus_result_t chorus_barrier(chorus_comm_t comm);

/* Point-to-point: tagged messages between two ranks, beside the collectives
 * (not in their order), never matching theirs. A send returns when buf may
 * be reused; a receive when a message of exactly `count` elements came
 * (another size is an error). peer CHORUS_ANY_SOURCE receives from any rank;
 * *source (may be NULL) gets the sender. Failures are as for collectives. */
#define CHORUS_ANY_SOURCE (-1)
CHORUS_C_API chorus_result_t chorus_send(const void* buf, size_t count, chorus_datatype_t datatype,
                                         int peer, uint32_t tag, chorus_comm_t comm);
CHORUS_C_API chorus_result_t chorus_recv(void* buf, size_t count, chorus_datatype_t datatype,
                                         int peer, uint32_t tag, int* source, chorus_comm_t comm);

/* The v-forms: counts and displs are arrays of `size` elements counts and
 * offsets (in elements); displs NULL means blocks back to back in rank
 * order. gatherv's recv arrays and scatterv's send arrays are read at the
 * root only (NULL elsewhere). */
/* recvbuf's block j (counts[j] at displs[j]) gets rank j's sendbuf of
 * counts[rank] elements; every rank passes the same counts. */
CHORUS_C_API chorus_result_t chorus_allgatherv(const void* sendbuf, void* recvbuf,
                                               const size_t* counts, const size_t* displs,
                                               chorus_datatype_t datatype, chorus_comm_t comm);
/* sendbuf holds size blocks back to back, recvcounts[j] each; recvbuf gets
 * block `rank` reduced over all ranks (MPI_Reduce_scatter). */
CHORUS_C_API chorus_result_t chorus_reduce_scatter_v(const void* sendbuf, void* recvbuf,
                                                     const size_t* recvcounts,
                                                     chorus_datatype_t datatype,
                                                     chorus_redop_t op, chorus_comm_t comm);
/* sendbuf's block j goes to rank j, into its recvbuf's block `rank`. */
CHORUS_C_API chorus_result_t chorus_alltoallv(const void* sendbuf, const size_t* sendcounts,
                                              const size_t* sdispls, void* recvbuf,
                                              const size_t* recvcounts, const size_t* rdispls,
                                              chorus_datatype_t datatype, chorus_comm_t comm);
CHORUS_C_API chorus_result_t chorus_gatherv(const void* sendbuf, size_t sendcount, void* recvbuf,
                                            const size_t* recvcounts, const size_t* displs,
                                            chorus_datatype_t datatype, int root,
                                            chorus_comm_t comm);
CHORUS_C_API chorus_result_t chorus_scatterv(const void* sendbuf, const size_t* sendcounts,
                                             const size_t* displs, void* recvbuf,
                                             size_t recvcount, chorus_datatype_t datatype,
                                             int root, chorus_comm_t comm);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_CHORUS_H */
